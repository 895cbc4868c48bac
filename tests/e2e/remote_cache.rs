//! The remote cache tier against a real nginx (Debian's `nginx-light`, WebDAV PUT with basic auth) that each
//! test starts on a free 127.0.0.1 port with a generated config and stops by its pid: a second clone of a
//! project builds nothing the first one built, and a remote that is down, lies, refuses the credentials, is
//! read-only or loses an engine half-way through an upload never fails a run nor leaves an entry that names
//! a missing blob.

use std::collections::BTreeMap;
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use crate::support::{KillOnDrop, Sandbox, frac_project, text};

const USER: &str = "lab";
const PASSWORD: &str = "s3cret-pw";

/// An nginx serving `store/` by WebDAV under `/cache/`, killed by pid when dropped.
struct Nginx {
    dir: tempfile::TempDir,
    port: u16,
    process: Option<KillOnDrop>,
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}

fn nginx_program() -> PathBuf {
    let path = PathBuf::from("/usr/sbin/nginx");
    assert!(
        path.is_file(),
        "nginx is missing: install Debian's nginx-light (.ci/run does)"
    );
    path
}

impl Nginx {
    fn start() -> Nginx {
        let dir = tempfile::tempdir().expect("nginx dir");
        let root = dir.path();
        for sub in ["store/cache", "body"] {
            std::fs::create_dir_all(root.join(sub)).expect("nginx dirs");
        }
        std::fs::write(
            root.join("htpasswd"),
            format!("{USER}:{{PLAIN}}{PASSWORD}\n"),
        )
        .expect("htpasswd");
        let port = free_port();
        // As root, the worker would run as `nobody` and could not write the store: it runs as root here.
        // SAFETY: geteuid has no preconditions.
        let user = if unsafe { libc::geteuid() } == 0 {
            "user root root;\n"
        } else {
            ""
        };
        let config = format!(
            "daemon off;\nmaster_process off;\nworker_processes 1;\n{user}pid {dir}/nginx.pid;\n\
             error_log {dir}/error.log;\nevents {{ worker_connections 64; }}\n\
             http {{\n  access_log {dir}/access.log;\n  client_body_temp_path {dir}/body;\n\
             \x20 server {{\n    listen 127.0.0.1:{port};\n    root {dir}/store;\n    client_max_body_size 64m;\n\
             \x20   location /cache/ {{\n      dav_methods PUT DELETE MKCOL;\n      create_full_put_path on;\n\
             \x20     dav_access user:rw group:r all:r;\n      auth_basic \"fracflow cache\";\n\
             \x20     auth_basic_user_file {dir}/htpasswd;\n    }}\n  }}\n}}\n",
            dir = root.display()
        );
        std::fs::write(root.join("nginx.conf"), config).expect("nginx.conf");
        let child = Command::new(nginx_program())
            .arg("-p")
            .arg(root)
            .arg("-c")
            .arg(root.join("nginx.conf"))
            .arg("-e")
            .arg(root.join("error.log"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start nginx");
        let nginx = Nginx {
            dir,
            port,
            process: Some(KillOnDrop(child)),
        };
        let deadline = Instant::now() + Duration::from_secs(10);
        while TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(
                Instant::now() < deadline,
                "nginx did not listen on {port}: {}",
                std::fs::read_to_string(nginx.dir.path().join("error.log")).unwrap_or_default()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        nginx
    }

    fn url(&self) -> String {
        format!("http://127.0.0.1:{}/cache", self.port)
    }

    fn store(&self) -> PathBuf {
        self.dir.path().join("store/cache")
    }

    fn pid_file(&self) -> PathBuf {
        self.dir.path().join("nginx.pid")
    }

    fn stop(&mut self) {
        self.process.take();
    }

    /// The access log's requests with this method.
    fn requests(&self, method: &str) -> usize {
        std::fs::read_to_string(self.dir.path().join("access.log"))
            .unwrap_or_default()
            .lines()
            .filter(|l| l.contains(&format!("\"{method} ")))
            .count()
    }

    /// Every entry on the server names blobs that are there with the right content; returns how many entries.
    fn check_entries_name_whole_blobs(&self) -> usize {
        let mut entries = 0;
        for entry in files_under(&self.store().join("entries")) {
            let bytes = std::fs::read(&entry).expect("entry");
            let parsed: serde_json::Value = serde_json::from_slice(&bytes)
                .unwrap_or_else(|e| panic!("{} is not whole JSON: {e}", entry.display()));
            let mut hashes: Vec<String> = parsed["outputs"]
                .as_object()
                .expect("outputs")
                .values()
                .map(|b| b["hash"].as_str().expect("hash").to_owned())
                .collect();
            if let Some(log) = parsed["log"]["hash"].as_str() {
                hashes.push(log.to_owned());
            }
            for hash in hashes {
                let blob = self.store().join("blobs").join(&hash[..2]).join(&hash);
                let actual = fracflow_core::statcache::hash_file(&blob).unwrap_or_else(|e| {
                    panic!("{} names {hash}, which is not there: {e}", entry.display())
                });
                assert_eq!(
                    actual,
                    hash,
                    "{} names a blob with other bytes",
                    entry.display()
                );
            }
            entries += 1;
        }
        entries
    }
}

fn files_under(dir: &Path) -> Vec<PathBuf> {
    let mut files = Vec::new();
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let path = entry.path();
        if path.is_dir() {
            files.extend(files_under(&path));
        } else {
            files.push(path);
        }
    }
    files
}

/// `fracflow ARGS` in `sandbox` with the remote cache at `nginx` (credentials in the environment).
fn remote_run(sandbox: &Sandbox, nginx: &Nginx, password: &str, args: &[&str]) -> Output {
    sandbox
        .command(args)
        .env("FRACFLOW_REMOTE_CACHE", nginx.url())
        .env("FRACFLOW_REMOTE_CACHE_USER", USER)
        .env("FRACFLOW_REMOTE_CACHE_PASSWORD", password)
        .env_remove("FRACFLOW_REMOTE_CACHE_MODE")
        .output()
        .expect("spawn fracflow")
}

fn remote_warnings(output: &Output) -> Vec<String> {
    String::from_utf8_lossy(&output.stderr)
        .lines()
        .filter(|l| l.starts_with("warning: remote cache"))
        .map(str::to_owned)
        .collect()
}

/// `N built, M cached` of the run summary line.
fn built_and_cached(output: &Output) -> (usize, usize) {
    let all = text(output);
    let line = all
        .lines()
        .find(|l| l.contains(" built, ") && l.contains(" cached, "))
        .unwrap_or_else(|| panic!("no summary line:\n{all}"));
    let number = |word: &str| -> usize {
        let before = line.split(word).next().unwrap_or_default();
        before
            .rsplit(|c: char| !c.is_ascii_digit())
            .find(|s| !s.is_empty())
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("no count before `{word}` in {line}"))
    };
    (number(" built"), number(" cached"))
}

/// Node id → (key, outputs) of the run a `latest` link points at.
fn keys_and_outputs(
    run: &Path,
) -> BTreeMap<
    String,
    (
        Option<fracflow_record::Digest>,
        fracflow_record::SortedMap<fracflow_record::Digest>,
    ),
> {
    let manifest = fracflow_core::run::read_manifest(run).expect("manifest");
    manifest
        .nodes
        .into_iter()
        .map(|(id, record)| (id, (record.key, record.outputs)))
        .collect()
}

#[test]
fn a_second_clone_builds_and_measures_nothing_the_first_one_did() {
    let nginx = Nginx::start();
    let a = frac_project();
    let b = frac_project();
    for (args, pipeline, variant) in [
        (&["run", "bitstreams"][..], "frac-bitstreams", None),
        (
            &["run", "fig16", "--smoke"][..],
            "scalability",
            Some("smoke"),
        ),
    ] {
        // The claims' verdicts are not this test's business (an emulated point starved by a loaded machine may
        // fail one, exit 5): every node must complete, and B must get all of it from the remote.
        let completed = |output: &Output| matches!(output.status.code(), Some(0 | 5));
        let first = remote_run(&a, &nginx, PASSWORD, args);
        assert!(completed(&first), "A {args:?}:\n{}", text(&first));
        assert!(remote_warnings(&first).is_empty(), "{}", text(&first));
        let (built, _) = built_and_cached(&first);
        assert!(built > 0, "A built nothing:\n{}", text(&first));

        let mut plan_args = args.to_vec();
        plan_args[0] = "plan";
        let plan = remote_run(&b, &nginx, PASSWORD, &plan_args);
        assert!(plan.status.success(), "B plan:\n{}", text(&plan));
        assert!(
            text(&plan).contains(", 0 to run,") && text(&plan).contains("from the remote cache"),
            "B's plan must say the remote serves everything:\n{}",
            text(&plan)
        );

        let second = remote_run(&b, &nginx, PASSWORD, args);
        assert!(completed(&second), "B {args:?}:\n{}", text(&second));
        assert!(remote_warnings(&second).is_empty(), "{}", text(&second));
        assert_eq!(
            built_and_cached(&second).0,
            0,
            "B built:\n{}",
            text(&second)
        );
        let (ours, theirs) = (
            keys_and_outputs(&a.latest_on(pipeline, variant, "emulated")),
            keys_and_outputs(&b.latest_on(pipeline, variant, "emulated")),
        );
        assert_eq!(ours, theirs, "B's keys and output hashes must be A's");
    }
    assert!(nginx.check_entries_name_whole_blobs() > 0);
    // The credentials went only into the Authorization header.
    for run in files_under(&b.results("scalability")) {
        if run
            .file_name()
            .is_some_and(|n| n == "manifest.json" || n == "events.jsonl")
        {
            let bytes = std::fs::read_to_string(&run).unwrap_or_default();
            assert!(
                !bytes.contains(PASSWORD),
                "{} holds the password",
                run.display()
            );
        }
    }
}

/// A chain of `n` nodes, each writing its index; `first` is the command of the first node.
fn chain(n: usize, first: &str) -> String {
    let mut yaml = String::from("pipeline: chain\nnodes:\n");
    for i in 0..n {
        let run = if i == 0 {
            first.to_owned()
        } else {
            format!("echo {i} > \"$FRACFLOW_OUT/o\"")
        };
        yaml.push_str(&format!(
            "  n{i}:\n    kind: command\n    outputs: [o]\n    run: '{run}'\n"
        ));
        if i > 0 {
            yaml.push_str(&format!("    deps: [n{}]\n", i - 1));
        }
    }
    yaml
}

fn chain_project(first: &str) -> Sandbox {
    let sandbox = Sandbox::new();
    sandbox.write("pipelines/chain.yaml", &chain(6, first));
    sandbox
}

#[test]
fn wrong_credentials_a_tampered_blob_and_read_mode_never_fail_a_run() {
    let nginx = Nginx::start();
    let seed = "echo 0 > \"$FRACFLOW_OUT/o\"";
    let a = chain_project(seed);
    let first = remote_run(&a, &nginx, PASSWORD, &["run", "chain"]);
    assert!(first.status.success(), "{}", text(&first));
    assert_eq!(built_and_cached(&first), (6, 0));

    // Wrong credentials: one warning, the run builds locally.
    let wrong = chain_project(seed);
    let refused = remote_run(&wrong, &nginx, "not-the-password", &["run", "chain"]);
    assert!(refused.status.success(), "{}", text(&refused));
    let warnings = remote_warnings(&refused);
    assert_eq!(warnings.len(), 1, "{}", text(&refused));
    assert!(
        warnings[0].contains("401") && warnings[0].contains("local cache only"),
        "{warnings:?}"
    );
    assert!(
        !text(&refused).contains("not-the-password"),
        "{}",
        text(&refused)
    );
    assert_eq!(built_and_cached(&refused).0, 6);

    // A blob altered on the server: detected by its hash, that node runs here, the others come from the
    // remote (its rebuilt output is the same, so their keys are).
    let manifest = keys_and_outputs(&a.latest_on("chain", None, "emulated"));
    let hash = manifest["n0"].1["o"].to_string();
    let blob = nginx.store().join("blobs").join(&hash[..2]).join(&hash);
    std::fs::write(&blob, b"9\n").expect("tamper with the blob");
    let c = chain_project(seed);
    let tampered = remote_run(&c, &nginx, PASSWORD, &["run", "chain"]);
    assert!(tampered.status.success(), "{}", text(&tampered));
    let warnings = remote_warnings(&tampered);
    assert_eq!(warnings.len(), 1, "{}", text(&tampered));
    assert!(
        warnings[0].contains("does not match its hash"),
        "{warnings:?}"
    );
    assert_eq!(built_and_cached(&tampered), (1, 5), "{}", text(&tampered));
    assert_eq!(
        std::fs::read(c.latest_on("chain", None, "emulated").join("nodes/n0/o"))
            .expect("n0's view"),
        b"0\n"
    );

    // Read mode: the nodes it builds are not uploaded. A new first node changes n1's key; n1 writes what it
    // wrote before, so from n2 on the keys are A's again (early cutoff) and the remote serves them.
    let puts = nginx.requests("PUT");
    let d = chain_project("echo read-only > \"$FRACFLOW_OUT/o\"");
    let read = d
        .command(&["run", "chain"])
        .env("FRACFLOW_REMOTE_CACHE", nginx.url())
        .env("FRACFLOW_REMOTE_CACHE_USER", USER)
        .env("FRACFLOW_REMOTE_CACHE_PASSWORD", PASSWORD)
        .env("FRACFLOW_REMOTE_CACHE_MODE", "read")
        .output()
        .expect("spawn fracflow");
    assert!(read.status.success(), "{}", text(&read));
    assert_eq!(built_and_cached(&read), (2, 4), "{}", text(&read));
    assert_eq!(nginx.requests("PUT"), puts, "read mode sent a PUT");
    assert!(nginx.requests("GET") > 0, "read mode still asks");
    nginx.check_entries_name_whole_blobs();
}

#[test]
fn nginx_stopped_during_a_run_leaves_one_warning_and_a_local_run() {
    let mut nginx = Nginx::start();
    let a = chain_project("echo 0 > \"$FRACFLOW_OUT/o\"");
    let first = remote_run(&a, &nginx, PASSWORD, &["run", "chain"]);
    assert!(first.status.success(), "{}", text(&first));
    // B's first node differs (it stops the server), so the rest is asked for while nginx is gone.
    let stop = format!(
        "kill $(cat {}); echo stopped > \"$FRACFLOW_OUT/o\"",
        nginx.pid_file().display()
    );
    let b = chain_project(&stop);
    let second = remote_run(&b, &nginx, PASSWORD, &["run", "chain"]);
    assert!(second.status.success(), "{}", text(&second));
    let warnings = remote_warnings(&second);
    assert_eq!(warnings.len(), 1, "{}", text(&second));
    assert!(warnings[0].contains("local cache only"), "{warnings:?}");
    assert_eq!(built_and_cached(&second), (6, 0));
    nginx.stop();
}

#[test]
fn an_engine_killed_while_uploading_leaves_no_entry_naming_a_missing_blob() {
    let nginx = Nginx::start();
    let sandbox = Sandbox::new();
    // Six nodes of 24 MB of their own random bytes: uploads are still going when the engine is killed.
    let mut yaml = String::from("pipeline: big\nnodes:\n");
    for i in 0..6 {
        yaml.push_str(&format!(
            "  b{i}:\n    kind: command\n    outputs: [o]\n    run: 'head -c 24000000 /dev/urandom > \"$FRACFLOW_OUT/o\"'\n"
        ));
    }
    sandbox.write("pipelines/big.yaml", &yaml);
    let child = sandbox
        .command(&["run", "big", "--jobs", "2"])
        .env("FRACFLOW_REMOTE_CACHE", nginx.url())
        .env("FRACFLOW_REMOTE_CACHE_USER", USER)
        .env("FRACFLOW_REMOTE_CACHE_PASSWORD", PASSWORD)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn fracflow");
    let mut engine = KillOnDrop(child);
    // Killed once the first entry is on the server and more blobs are on their way.
    let deadline = Instant::now() + Duration::from_secs(120);
    while nginx.requests("PUT") < 4 && Instant::now() < deadline {
        if let Ok(Some(_)) = engine.0.try_wait() {
            break;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    let _ = engine.0.kill();
    let _ = engine.0.wait();
    assert!(
        nginx.requests("PUT") >= 1,
        "the engine uploaded nothing before it was killed"
    );
    nginx.check_entries_name_whole_blobs();
    // What is on the server serves a clean clone; the rest is built there.
    let clone = Sandbox::new();
    clone.write("pipelines/big.yaml", &yaml);
    let rerun = remote_run(&clone, &nginx, PASSWORD, &["run", "big"]);
    assert!(rerun.status.success(), "{}", text(&rerun));
    assert!(remote_warnings(&rerun).is_empty(), "{}", text(&rerun));
    assert_eq!(built_and_cached(&rerun).0 + built_and_cached(&rerun).1, 6);
}
