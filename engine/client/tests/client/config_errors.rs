//! Bad flags are refused before connecting.

use fracflow_client::{ClientConfig, ConfigError, run};

fn parse(args: &str) -> Result<ClientConfig, ConfigError> {
    let args: Vec<String> = args.split_whitespace().map(str::to_owned).collect();
    ClientConfig::from_fperf_args(&args)
}

#[test]
fn refused_before_connecting() {
    // Port 1 on loopback: nothing listens, but no error may be a connect error.
    let base = "-c 127.0.0.1 -p 1 -t rr -d 1";
    let cases: [(&str, ConfigError); 8] = [
        ("-t rr -d 1 -Z 1", ConfigError::MissingHost),
        (
            &format!("{base} -Z 1 -m 1024 -X 1000"),
            ConfigError::RequestNotWholeLines(1000),
        ),
        (
            &format!("{base} -Z 1 -m 1000 -X 1024"),
            ConfigError::PieceNotWholeLines(1000),
        ),
        (
            &format!("{base} -Z 1 -X 1024 -R 70000"),
            ConfigError::ResponseSize(70000),
        ),
        (
            &format!("{base} -Z 1 -X 1024 -R 64 -K 0xab"),
            ConfigError::ControllerSlot,
        ),
        (
            &format!("{base} -Z 1 -X 1024 -R 64 -K 4"),
            ConfigError::SlotOutOfRange(4),
        ),
        (
            &format!("{base} -Z 1 -X 128k"),
            ConfigError::RequestSize(128 << 10),
        ),
        (&format!("{base} -L 1"), ConfigError::LogDirMissing),
    ];
    for (args, want) in cases {
        assert_eq!(parse(args), Err(want.clone()), "{args}");
        assert!(!want.to_string().is_empty());
    }
    assert_eq!(parse("-c h -d 1"), Err(ConfigError::MissingTest));
    assert_eq!(
        parse("-c h -t crr"),
        Err(ConfigError::UnsupportedTest("crr".into()))
    );
    assert!(matches!(
        parse("-c h -t rr -x 1"),
        Err(ConfigError::UnknownFlag(_))
    ));
    assert!(matches!(
        parse("-c h -t rr -E t.csv -n 2"),
        Err(ConfigError::Trace(_))
    ));
    assert!(matches!(
        parse("-c h -t rr -d 2 --skip 2"),
        Err(ConfigError::Skip { .. })
    ));
    assert!(matches!(
        parse("-c h -t rr --open-loop 0"),
        Err(ConfigError::Rate(_))
    ));
    // The error text says why.
    assert!(
        ConfigError::ControllerSlot
            .to_string()
            .contains("reconfiguration controller")
    );

    // run() refuses an invalid config without connecting.
    let mut c = ClientConfig {
        host: "127.0.0.1".into(),
        port: 1,
        ..ClientConfig::default()
    };
    c.framing = fracflow_client::Framing::Frac;
    c.request_size = 100;
    assert!(matches!(
        run(&c, &mut ()),
        Err(fracflow_client::ClientError::Config(_))
    ));
}

#[test]
fn fperf_defaults_and_suffixes() {
    let c = parse("-c 10.0.0.1 -t rr -m 4k -Z 1 -K 1 -S 0 -n 2 -C 3 -d 1m").expect("parses");
    assert_eq!(c.port, 4096);
    assert_eq!(
        (c.piece_size, c.request_size, c.response_size),
        (4096, 4096, 4096)
    );
    assert_eq!(
        (c.threads, c.conns_per_thread, c.start_cpu),
        (2, 3, Some(0))
    );
    assert_eq!(c.duration_s, Some(60));
    let c = parse("-c h -t rr -E trace.csv -Z 1").expect("parses");
    assert_eq!(
        (c.piece_size, c.duration_s),
        (512, None),
        "-E forces -m 512 and runs to the end"
    );
    let c = parse("-c h -t rr -S -4096 --open-loop 1000:poisson --seed 3").expect("parses");
    assert_eq!(c.start_cpu, None);
    assert_eq!(
        c.open_loop.map(|o| (o.arrivals, o.seed)),
        Some((fracflow_client::Arrivals::Poisson, 3))
    );
}
