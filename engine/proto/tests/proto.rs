//! Tests of fracflow-proto: golden bytes from the worked examples of
//! `docs/frac.md` §2.6 and `docs/tools.md` §1.8-1.9 ("frac §", "fperf §"),
//! round trips, reassembly under every split, error cases and limits.
//!
//! Golden bytes are written by hand from those sections in the notation
//! `ffx56` = 56 bytes of 0xff (the docs' `ff x56`); `|` is ignored.

use fracflow_proto::{
    CONTROLLER_WORKLOAD, CommandLine, ControllerCommand, ControllerRequest, ControllerResponse,
    ErrorCode, Flags, FracFraming, LINE, MAX_REQUEST_BYTES, Opcode, ProtoError, QueryStatus,
    Reassembler, ReconfOptions, Request, RequestHeader, Route, SegmentReassembler, TestInfo,
    TestMode, Unit, reconf_upload,
};

/// Parses whitespace-separated hex bytes; `abxN` repeats `ab` N (decimal) times.
fn hex(s: &str) -> Vec<u8> {
    let mut out = Vec::new();
    for tok in s.split_whitespace().filter(|t| *t != "|") {
        let (byte, n) = match tok.split_once('x') {
            Some((b, n)) => (b, n.parse::<usize>().expect("repeat count")),
            None => (tok, 1),
        };
        let b = u8::from_str_radix(byte, 16).expect("hex byte");
        out.extend(std::iter::repeat_n(b, n));
    }
    out
}

fn line(s: &str) -> [u8; 64] {
    hex(s).try_into().expect("exactly 64 bytes")
}

/// splitmix64, a small deterministic PRNG.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform-ish in 1..=max.
    fn between_1_and(&mut self, max: usize) -> usize {
        (self.next() % max as u64) as usize + 1
    }
}

/// Feeds `stream` in the given pieces and returns all outcomes.
fn feed_split(stream: &[u8], cuts: &[usize]) -> Vec<Result<Request, ProtoError>> {
    let mut r = Reassembler::new();
    let mut out = Vec::new();
    let mut start = 0;
    for &cut in cuts.iter().chain(std::iter::once(&stream.len())) {
        out.extend(r.feed(&stream[start..cut]));
        start = cut;
    }
    assert!(r.is_idle(), "stream ends between requests");
    out
}

fn ok_requests(outcomes: Vec<Result<Request, ProtoError>>) -> Vec<Request> {
    outcomes
        .into_iter()
        .map(|o| o.expect("no error expected"))
        .collect()
}

// Example B's data line: counter words 0xaaaaaaaa..0xaaaaaab9, LE.
const EXAMPLE_B_DATA: &str = "aa aa aa aa ab aa aa aa ac aa aa aa ad aa aa aa \
     ae aa aa aa af aa aa aa b0 aa aa aa b1 aa aa aa \
     b2 aa aa aa b3 aa aa aa b4 aa aa aa b5 aa aa aa \
     b6 aa aa aa b7 aa aa aa b8 aa aa aa b9 aa aa aa";

mod golden {
    use super::*;

    /// Example A: 192-byte Top-K request to slot 0, whole in one piece.
    #[test]
    fn example_a_topk_whole() {
        let header = hex("ffx56 | c0 00 00 00 | ff ff | 00 00");
        let data: Vec<u8> = (1u32..=32).flat_map(u32::to_le_bytes).collect();
        let mut expected = header.clone();
        expected.extend_from_slice(&data);

        let framed = FracFraming::new(0, 192, 192)
            .build_with_payload(&data)
            .expect("valid");
        assert_eq!(framed.bytes(), &expected[..]);
        assert_eq!(framed.piece_count(), 1);

        let reqs = ok_requests(Reassembler::new().feed(&expected));
        assert_eq!(reqs.len(), 1);
        assert_eq!(
            reqs[0].header,
            RequestHeader {
                declared_size: 192,
                top_config: 0xffff,
                workload: 0
            }
        );
        assert_eq!(reqs[0].header.flags(), Flags::FIRST_LAST);
        assert_eq!(reqs[0].route(), Route::Slot(0));
        assert_eq!(reqs[0].payload, data);
        assert_eq!(Unit::TopK.response_size(192), Some(64));
    }

    /// Example B: 128 bytes, header alone (FIRST only), then a counter line.
    #[test]
    fn example_b_header_alone_then_data() {
        let header = hex("ffx56 | 80 00 00 00 | fd ff | 01 00");
        let data = hex(EXAMPLE_B_DATA);
        assert_eq!(data.len(), 64);

        let framed = FracFraming::new(1, 128, 64)
            .build_with_payload(&data)
            .expect("valid");
        let pieces: Vec<&[u8]> = framed.pieces().collect();
        assert_eq!(pieces, vec![&header[..], &data[..]]);

        let header_line: [u8; 64] = header.clone().try_into().expect("64 bytes");
        let decoded = RequestHeader::decode(&header_line).expect("header");
        assert_eq!(decoded.declared_size, 128);
        assert_eq!(decoded.top_config, 0xfffd);
        assert_eq!(decoded.flags(), Flags::FIRST);
        assert_eq!(decoded.route(), Route::Slot(1));

        // Segment model: header alone (FIRST only) does not end the request.
        let mut seg = SegmentReassembler::new();
        assert_eq!(seg.feed_segment(&header), Ok(None));
        let req = seg.feed_segment(&data).expect("ok").expect("complete");
        // pattern_slot answers 128 bytes: header echoed, then the data line.
        let echo = req.wire_bytes();
        assert_eq!(
            echo.len() as u32,
            Unit::Pattern.response_size(128).expect("answers")
        );
        assert_eq!(&echo[56..64], &hex("80 00 00 00 fd ff 01 00")[..]);
        assert_eq!(&echo[64..], &data[..]);
        assert_eq!(Unit::TopK.response_size(128), Some(64));
    }

    /// Example C: `-Z 1 -K 1 -X 4096 -m 1024`.
    #[test]
    fn example_c_four_pieces() {
        let framed = FracFraming::new(1, 4096, 1024).build().expect("valid");
        let pieces: Vec<&[u8]> = framed.pieces().collect();
        assert_eq!(pieces.len(), 4);
        assert_eq!(
            pieces[0],
            &hex("ffx56 | 00 10 00 00 | fd ff | 01 00 | 9fx960")[..]
        );
        for piece in &pieces[1..] {
            assert_eq!(*piece, &hex("9fx1024")[..]);
        }

        let mut seg = SegmentReassembler::new();
        for piece in &pieces[..3] {
            assert_eq!(seg.feed_segment(piece), Ok(None));
        }
        let req = seg.feed_segment(pieces[3]).expect("ok").expect("complete");
        assert_eq!(req.payload, hex("9fx4032"));
        assert_eq!(Unit::TopK.response_size(4096), Some(64));
    }

    /// Example C's remark: with `-X <= -m` fperf sets FIRST|LAST, one piece.
    #[test]
    fn example_c_single_piece_variant() {
        let framed = FracFraming::new(1, 4096, 4096).build().expect("valid");
        assert_eq!(framed.piece_count(), 1);
        // fperf §1.8: bytes 56..63 are `00 10 00 00 FF FF 01 00`.
        assert_eq!(&framed.bytes()[56..64], &hex("00 10 00 00 ff ff 01 00")[..]);
    }

    /// Example D: RECONF_ICAP of slot 0 from 4096 bytes at HBM 0x4000.
    #[test]
    fn example_d_reconf_icap() {
        let expected = hex("ffx56 | 40 00 00 00 | ff ff | ab 00 \
             03 00 00 00 00 00 00 00 | 00 40 00 00 00 00 00 00 | 00 10 00 00 00 00 00 00 | 00x40");
        assert_eq!(expected.len(), 128);
        let cmd = ControllerRequest::ReconfIcap {
            slot: 0,
            addr: 0x4000,
            len: 4096,
        };
        assert_eq!(cmd.encode(), expected);

        let reqs = ok_requests(Reassembler::new().feed(&expected));
        assert_eq!(reqs.len(), 1);
        let header = reqs[0].header;
        assert_eq!(header.declared_size, 64);
        assert_eq!(header.wire_size(), 128);
        assert_eq!(header.flags(), Flags::FIRST_LAST);
        assert_eq!(header.route(), Route::Controller);
        assert_eq!(
            ControllerRequest::from_request(&header, &reqs[0].payload),
            Ok(ControllerCommand::Valid(cmd.clone()))
        );

        let sent = cmd.command_line();
        let ok_line = line("00x64");
        let icap_line = line("09 00x63");
        assert_eq!(ControllerResponse::Status(ErrorCode::Ok).encode(), ok_line);
        assert_eq!(
            ControllerResponse::Status(ErrorCode::Icap).encode(),
            icap_line
        );
        assert_eq!(
            ControllerResponse::decode(&sent, &ok_line),
            Ok(ControllerResponse::Status(ErrorCode::Ok))
        );
        assert_eq!(
            ControllerResponse::decode(&sent, &icap_line),
            Ok(ControllerResponse::Status(ErrorCode::Icap))
        );
    }
}

mod header {
    use super::*;

    fn hdr(declared_size: u32, top_config: u16, workload: u16) -> RequestHeader {
        RequestHeader {
            declared_size,
            top_config,
            workload,
        }
    }

    #[test]
    fn layout_is_little_endian_at_56_60_62() {
        let h = hdr(0x0403_0201, 0x0605, 0x0807);
        assert_eq!(h.encode(), line("ffx56 01 02 03 04 05 06 07 08"));
        assert_eq!(RequestHeader::read_fields(&h.encode()), h);
    }

    #[test]
    fn round_trips() {
        let cases = [
            hdr(64, 0xffff, 0),
            hdr(128, 0xfffd, 1),
            hdr(4096, 0x0001, 3),
            hdr(65_472, 0x1235, 0xffff),
            hdr(64, 0xffff, CONTROLLER_WORKLOAD),
            hdr(65_408, 0x0003, CONTROLLER_WORKLOAD),
        ];
        for h in cases {
            let bytes = h.encode();
            assert_eq!(RequestHeader::decode(&bytes), Ok(h));
            let again = RequestHeader::decode(&bytes).expect("valid").encode();
            assert_eq!(again, bytes);
        }
    }

    #[test]
    fn routing() {
        assert_eq!(Route::from_workload(0), Route::Slot(0));
        assert_eq!(Route::from_workload(1), Route::Slot(1));
        assert_eq!(Route::from_workload(2), Route::Slot(2));
        assert_eq!(Route::from_workload(3), Route::Slot(3));
        assert_eq!(Route::from_workload(4), Route::Slot(0));
        assert_eq!(Route::from_workload(0x00aa), Route::Slot(0));
        assert_eq!(Route::from_workload(0x00ab), Route::Controller);
        assert_eq!(Route::from_workload(0xab00), Route::Slot(0));
        assert_eq!(Route::from_workload(0xffff), Route::Slot(0));
        // Byte order: bytes 62-63 = `ab 00` is the controller.
        let h = RequestHeader::read_fields(&line("ffx56 40 00 00 00 ff ff ab 00"));
        assert_eq!(h.route(), Route::Controller);
    }

    #[test]
    fn flags_alias_top_config_bits() {
        let h = RequestHeader::accelerator(2, 256, Flags::FIRST);
        assert_eq!(h.top_config, 0xfffd);
        assert_eq!(h.with_flags(Flags::FIRST_LAST).top_config, 0xffff);
        assert_eq!(
            hdr(64, 0x1234, 0).with_flags(Flags::FIRST).top_config,
            0x1235
        );
        assert_eq!(hdr(64, 0x1237, 0).flags(), Flags::FIRST_LAST);
        assert_eq!(Flags::FIRST | Flags::LAST, Flags::FIRST_LAST);
        assert!(Flags::FIRST_LAST.is_first() && Flags::FIRST_LAST.is_last());
        assert!(!Flags::NONE.is_first());
    }

    #[test]
    fn controller_size_excludes_header() {
        let h = RequestHeader::controller(64);
        assert_eq!(h.wire_size(), 128);
        assert_eq!(h.body_len(), 64);
        let a = hdr(64, 0xffff, 0);
        assert_eq!(a.wire_size(), 64);
        assert_eq!(a.body_len(), 0);
    }

    #[test]
    fn rejects_missing_first() {
        let bytes = line("ffx56 80 00 00 00 fe ff 00 00");
        assert_eq!(
            RequestHeader::decode(&bytes),
            Err(ProtoError::MissingFirst { top_config: 0xfffe })
        );
        // FIRST is checked before the prefix.
        let data = line("00x64");
        assert_eq!(
            RequestHeader::decode(&data),
            Err(ProtoError::MissingFirst { top_config: 0 })
        );
    }

    #[test]
    fn rejects_bad_prefix_at_every_offset() {
        for offset in 0..56 {
            let mut bytes = hdr(128, 0xffff, 0).encode();
            bytes[offset] = 0xfe;
            assert_eq!(
                RequestHeader::decode(&bytes),
                Err(ProtoError::BadPrefix { offset, byte: 0xfe })
            );
        }
        // A 0x9f filler line has both flag bits set but is not a header.
        assert_eq!(
            RequestHeader::decode(&line("9fx64")),
            Err(ProtoError::BadPrefix {
                offset: 0,
                byte: 0x9f
            })
        );
    }

    #[test]
    fn size_limits_for_accelerators() {
        let dec = |size: u32| RequestHeader::decode(&hdr(size, 0xffff, 1).encode());
        assert!(dec(64).is_ok());
        assert!(dec(65_472).is_ok());
        assert_eq!(dec(MAX_REQUEST_BYTES).map(|h| h.wire_size()), Ok(65_472));
        assert_eq!(
            dec(65_536),
            Err(ProtoError::SizeTooLarge { wire_size: 65_536 })
        );
        assert_eq!(
            dec(u32::MAX - 63),
            Err(ProtoError::SizeTooLarge {
                wire_size: u64::from(u32::MAX - 63)
            })
        );
        assert_eq!(
            dec(100),
            Err(ProtoError::SizeNotWholeLines { declared: 100 })
        );
        assert_eq!(
            dec(65_535),
            Err(ProtoError::SizeNotWholeLines { declared: 65_535 })
        );
        assert_eq!(
            dec(0),
            Err(ProtoError::SizeTooSmall {
                declared: 0,
                minimum: 64,
                route: Route::Slot(1)
            })
        );
    }

    #[test]
    fn size_limits_for_controller() {
        let dec = |size: u32| RequestHeader::decode(&RequestHeader::controller(size).encode());
        assert!(dec(64).is_ok());
        assert_eq!(dec(65_408).map(|h| h.wire_size()), Ok(65_472));
        assert_eq!(
            dec(65_472),
            Err(ProtoError::SizeTooLarge { wire_size: 65_536 })
        );
        assert_eq!(
            dec(0xffff_ffc0),
            Err(ProtoError::SizeTooLarge {
                wire_size: 0xffff_ffc0 + 64
            })
        );
        assert_eq!(
            dec(0),
            Err(ProtoError::SizeTooSmall {
                declared: 0,
                minimum: 64,
                route: Route::Controller
            })
        );
        assert_eq!(dec(96), Err(ProtoError::SizeNotWholeLines { declared: 96 }));
    }
}

mod reassembly {
    use super::*;

    fn accel(workload: u16, size: u32, fill: u8) -> Vec<u8> {
        let mut v = RequestHeader::accelerator(workload, size, Flags::FIRST)
            .encode()
            .to_vec();
        v.resize(size as usize, fill);
        v
    }

    /// A mixed stream: several slots, a header-only request, controller
    /// requests, filler lines that look like FIRST|LAST.
    fn mixed_stream() -> (Vec<u8>, Vec<(RequestHeader, usize)>) {
        let parts = [
            accel(0, 192, 0x9f),
            accel(1, 64, 0),
            ControllerRequest::QueryStatus.encode(),
            accel(3, 1024, 0x55),
            ControllerRequest::WriteHbm {
                addr: 0x1000_4000,
                data: vec![7; 100],
            }
            .encode(),
            accel(9, 128, 0xff),
        ];
        let mut stream = Vec::new();
        let mut expect = Vec::new();
        for p in &parts {
            let h = RequestHeader::decode(p[..64].try_into().expect("64")).expect("valid");
            expect.push((h, p.len() - 64));
            stream.extend_from_slice(p);
        }
        (stream, expect)
    }

    fn check(
        outcomes: Vec<Result<Request, ProtoError>>,
        stream: &[u8],
        expect: &[(RequestHeader, usize)],
    ) {
        let reqs = ok_requests(outcomes);
        assert_eq!(reqs.len(), expect.len());
        let mut rebuilt = Vec::new();
        for (req, (h, len)) in reqs.iter().zip(expect) {
            assert_eq!(req.header, *h);
            assert_eq!(req.payload.len(), *len);
            rebuilt.extend(req.wire_bytes());
        }
        assert_eq!(rebuilt, stream);
    }

    #[test]
    fn whole_stream_at_once() {
        let (stream, expect) = mixed_stream();
        check(Reassembler::new().feed(&stream), &stream, &expect);
    }

    #[test]
    fn byte_by_byte() {
        let (stream, expect) = mixed_stream();
        let cuts: Vec<usize> = (1..stream.len()).collect();
        check(feed_split(&stream, &cuts), &stream, &expect);
    }

    #[test]
    fn every_single_split_point() {
        let (stream, expect) = mixed_stream();
        for cut in 0..=stream.len() {
            check(feed_split(&stream, &[cut]), &stream, &expect);
        }
    }

    #[test]
    fn every_pair_of_split_points_small_request() {
        let mut stream = accel(2, 192, 0x9f);
        stream.extend(accel(1, 128, 0x11));
        let expect = [
            (RequestHeader::accelerator(2, 192, Flags::FIRST), 128),
            (RequestHeader::accelerator(1, 128, Flags::FIRST), 64),
        ];
        for a in 0..=stream.len() {
            for b in a..=stream.len() {
                check(feed_split(&stream, &[a, b]), &stream, &expect);
            }
        }
    }

    #[test]
    fn random_splits() {
        let (mut stream, mut expect) = mixed_stream();
        let max = accel(0, MAX_REQUEST_BYTES, 0x9f);
        expect.push((
            RequestHeader::accelerator(0, MAX_REQUEST_BYTES, Flags::FIRST),
            max.len() - 64,
        ));
        stream.extend(max);
        let mut rng = Rng(0x5eed);
        for round in 0..200 {
            let max_piece = [1, 7, 64, 65, 1000, 9000][round % 6];
            let mut cuts = Vec::new();
            let mut at = 0;
            loop {
                at += rng.between_1_and(max_piece);
                if at >= stream.len() {
                    break;
                }
                cuts.push(at);
            }
            check(feed_split(&stream, &cuts), &stream, &expect);
        }
    }

    #[test]
    fn header_alone_then_pieces() {
        let stream = accel(1, 4096, 0x9f);
        let mut r = Reassembler::new();
        assert!(r.feed(&stream[..64]).is_empty());
        assert_eq!(r.current_header().map(|h| h.declared_size), Some(4096));
        assert_eq!(r.buffered(), 64);
        assert!(r.feed(&stream[64..1024]).is_empty());
        assert!(r.feed(&stream[1024..4095]).is_empty());
        assert_eq!(r.buffered(), 4095);
        let out = ok_requests(r.feed(&stream[4095..]));
        assert_eq!(out.len(), 1);
        assert!(r.is_idle());
        assert_eq!(r.buffered(), 0);
    }

    /// In the byte stream LAST does not end a request early: Example A's
    /// FIRST|LAST header waits for its declared size.
    #[test]
    fn last_on_header_is_not_a_size_in_byte_stream() {
        let h = RequestHeader::accelerator(0, 192, Flags::FIRST_LAST).encode();
        let mut r = Reassembler::new();
        assert!(r.feed(&h).is_empty());
        assert!(!r.is_idle());
    }

    #[test]
    fn advance_consumes_exactly_one_request() {
        let mut stream = accel(0, 128, 1);
        stream.extend(accel(1, 128, 2));
        let mut r = Reassembler::new();
        let (used, out) = r.advance(&stream);
        assert_eq!((used, out), (64, None));
        let (used, out) = r.advance(&stream[64..]);
        assert_eq!(used, 64);
        assert!(matches!(out, Some(Ok(ref req)) if req.payload == vec![1; 64]));
        assert!(r.is_idle());
    }

    #[test]
    fn data_line_where_header_expected_is_dropped_then_resyncs() {
        // 0xaa has bit 0 clear: no FIRST.  Example B's counter line ends in
        // `b9 aa`, so it has FIRST set and fails on the prefix instead.
        let mut stream = hex("aax64");
        stream.extend(hex(EXAMPLE_B_DATA));
        stream.extend(accel(2, 128, 3));
        let out = Reassembler::new().feed(&stream);
        assert_eq!(out.len(), 3);
        assert_eq!(out[0], Err(ProtoError::MissingFirst { top_config: 0xaaaa }));
        assert_eq!(
            out[1],
            Err(ProtoError::BadPrefix {
                offset: 0,
                byte: 0xaa
            })
        );
        let req = out[2].as_ref().expect("resynced");
        assert_eq!(req.header.workload, 2);
    }

    #[test]
    fn bad_size_headers_are_reported() {
        let mut r = Reassembler::new();
        let h = |size| RequestHeader::accelerator(0, size, Flags::FIRST).encode();
        assert_eq!(
            r.feed(&h(100)),
            vec![Err(ProtoError::SizeNotWholeLines { declared: 100 })]
        );
        assert!(r.is_idle());
        assert_eq!(
            r.feed(&h(65_536)),
            vec![Err(ProtoError::SizeTooLarge { wire_size: 65_536 })]
        );
        assert_eq!(
            r.feed(&RequestHeader::controller(65_472).encode()),
            vec![Err(ProtoError::SizeTooLarge { wire_size: 65_536 })]
        );
        let mut bad_prefix = h(128);
        bad_prefix[3] = 0;
        assert_eq!(
            r.feed(&bad_prefix),
            vec![Err(ProtoError::BadPrefix { offset: 3, byte: 0 })]
        );
        assert!(r.is_idle());
    }

    #[test]
    fn largest_request_is_accepted_and_memory_is_bounded() {
        let stream = accel(3, 65_472, 0x9f);
        let mut r = Reassembler::new();
        for chunk in stream[..stream.len() - 1].chunks(1000) {
            assert!(r.feed(chunk).is_empty());
            assert!(r.buffered() <= MAX_REQUEST_BYTES as usize);
        }
        assert_eq!(r.buffered(), 65_471);
        let out = ok_requests(r.feed(&stream[stream.len() - 1..]));
        assert_eq!(out[0].payload.len(), 65_408);
        assert!(r.is_idle());
    }
}

mod segments {
    use super::*;

    fn header(workload: u16, size: u32, flags: Flags) -> Vec<u8> {
        RequestHeader::accelerator(workload, size, flags)
            .encode()
            .to_vec()
    }

    #[test]
    fn header_only_first_last_ends_request_early() {
        let mut seg = SegmentReassembler::new();
        let req = seg
            .feed_segment(&header(0, 4096, Flags::FIRST_LAST))
            .expect("ok")
            .expect("complete");
        assert_eq!(req.header.declared_size, 4096);
        assert!(req.payload.is_empty());
        assert!(seg.is_idle());
        // The data that follows is not a header.
        assert_eq!(
            seg.feed_segment(&hex("9fx64")),
            Err(ProtoError::BadPrefix {
                offset: 0,
                byte: 0x9f
            })
        );
        assert_eq!(
            seg.feed_segment(&hex("00x64")),
            Err(ProtoError::MissingFirst { top_config: 0 })
        );
    }

    #[test]
    fn whole_in_one_segment_with_last() {
        let mut bytes = header(0, 192, Flags::FIRST_LAST);
        bytes.extend(hex("01x128"));
        let req = SegmentReassembler::new()
            .feed_segment(&bytes)
            .expect("ok")
            .expect("complete");
        assert_eq!(req.payload, hex("01x128"));
    }

    #[test]
    fn bytes_beyond_declared_size_are_discarded() {
        let mut bytes = header(1, 128, Flags::FIRST_LAST);
        bytes.extend(hex("01x64 | 02x128"));
        let mut seg = SegmentReassembler::new();
        let req = seg.feed_segment(&bytes).expect("ok").expect("complete");
        assert_eq!(req.payload, hex("01x64"));
        assert!(seg.is_idle());

        // Also in a later segment of a multi-segment request.
        assert_eq!(seg.feed_segment(&header(2, 192, Flags::FIRST)), Ok(None));
        let req = seg
            .feed_segment(&hex("03x128 | 04x64"))
            .expect("ok")
            .expect("complete");
        assert_eq!(req.payload, hex("03x128"));
        assert!(seg.is_idle());
    }

    #[test]
    fn later_segments_are_data_whatever_their_flags() {
        let mut seg = SegmentReassembler::new();
        assert_eq!(seg.feed_segment(&header(1, 192, Flags::FIRST)), Ok(None));
        // A line that looks like a header is data here.
        let fake = header(3, 64, Flags::FIRST_LAST);
        assert_eq!(seg.feed_segment(&fake), Ok(None));
        let req = seg.feed_segment(&fake).expect("ok").expect("complete");
        assert_eq!(req.header.workload, 1);
        assert_eq!(req.payload, [fake.clone(), fake].concat());
    }

    #[test]
    fn malformed_segments_are_dropped_without_effect() {
        let mut seg = SegmentReassembler::new();
        for len in [0usize, 1, 63, 100, 8256] {
            assert_eq!(
                seg.feed_segment(&vec![0xff; len]),
                Err(ProtoError::SegmentDropped { len, max: 8192 })
            );
            assert!(seg.is_idle());
        }
        assert_eq!(
            seg.feed_segment(&header(0, 8192 + 64, Flags::FIRST)),
            Ok(None)
        );
        assert_eq!(
            seg.feed_segment(&hex("9fx100")),
            Err(ProtoError::SegmentDropped {
                len: 100,
                max: 8192
            })
        );
        assert_eq!(seg.current_header().map(|h| h.declared_size), Some(8256));
        assert_eq!(seg.feed_segment(&hex("9fx8128")), Ok(None));
        let done = seg.feed_segment(&hex("9fx64")).expect("ok");
        assert_eq!(done.map(|r| r.payload.len()), Some(8192));
    }

    #[test]
    fn segment_limit_is_configurable() {
        let mut seg = SegmentReassembler::with_max_segment(512);
        let mut bytes = header(0, 576, Flags::FIRST_LAST);
        bytes.extend(hex("00x512"));
        assert_eq!(
            seg.feed_segment(&bytes),
            Err(ProtoError::SegmentDropped { len: 576, max: 512 })
        );
        assert_eq!(seg.feed_segment(&bytes[..512]), Ok(None));
        assert!(seg.feed_segment(&bytes[512..]).expect("ok").is_some());
    }

    #[test]
    fn bad_header_sizes() {
        let mut seg = SegmentReassembler::new();
        assert_eq!(
            seg.feed_segment(&header(0, 100, Flags::FIRST_LAST)),
            Err(ProtoError::SizeNotWholeLines { declared: 100 })
        );
        assert_eq!(
            seg.feed_segment(&header(0, 65_536, Flags::FIRST)),
            Err(ProtoError::SizeTooLarge { wire_size: 65_536 })
        );
        assert!(seg.is_idle());
    }

    #[test]
    fn fperf_pieces_as_segments_for_every_piece_size() {
        for m in (64..=4096).step_by(64) {
            let framed = FracFraming::new(2, 4096, m).build().expect("valid");
            let mut seg = SegmentReassembler::new();
            let mut done = Vec::new();
            for piece in framed.pieces() {
                done.extend(seg.feed_segment(piece).expect("ok"));
            }
            assert_eq!(done.len(), 1, "m = {m}");
            assert_eq!(done[0].wire_bytes(), framed.bytes());
        }
    }
}

mod controller {
    use super::*;

    #[test]
    fn write_hbm_golden() {
        let cmd = ControllerRequest::WriteHbm {
            addr: 0x1000_4000,
            data: hex("5ax100"),
        };
        let expected = hex("ffx56 | c0 00 00 00 | ff ff | ab 00 \
             01 00 00 00 00 00 00 00 | 00 40 00 10 00 00 00 00 | 64 00 00 00 00 00 00 00 | 00x40 \
             5ax100 00x28");
        assert_eq!(cmd.encode(), expected);
        assert_eq!(cmd.header().wire_size(), 256);
    }

    #[test]
    fn read_and_query_golden() {
        let read = ControllerRequest::ReadHbm {
            addr: 0x20,
            len: 64,
        };
        assert_eq!(
            read.encode(),
            hex("ffx56 40 00 00 00 ff ff ab 00 | 02 00x7 | 20 00x7 | 40 00x7 | 00x40")
        );
        assert_eq!(
            ControllerRequest::QueryStatus.encode(),
            hex("ffx56 40 00 00 00 ff ff ab 00 | 04 00x63")
        );
    }

    #[test]
    fn command_line_reserved_bytes_are_ignored() {
        let raw = line("03 02 ffx6 | 00 40 00 00 00 00 00 00 | 00 10 00 00 00 00 00 00 | eex40");
        assert_eq!(
            CommandLine::decode(&raw),
            CommandLine {
                opcode: 3,
                slot: 2,
                hbm_addr: 0x4000,
                byte_count: 4096
            }
        );
    }

    fn cl(opcode: u8, slot: u8, hbm_addr: u64, byte_count: u64) -> CommandLine {
        CommandLine {
            opcode,
            slot,
            hbm_addr,
            byte_count,
        }
    }

    #[test]
    fn validation_order() {
        use ErrorCode as E;
        let v = |c: CommandLine| c.validate();
        assert_eq!(v(cl(0, 0, 0, 64)), Err(E::Opcode));
        assert_eq!(v(cl(5, 0, 0, 64)), Err(E::Opcode));
        // QUERY ignores everything else.
        assert_eq!(v(cl(4, 99, 0x3_0000_0001, 0)), Ok(Opcode::QueryStatus));
        // Address width before alignment before size.
        assert_eq!(v(cl(1, 0, 0x2_0000_0001, 0)), Err(E::Addr));
        assert_eq!(v(cl(1, 0, 0x1_ffff_ffe0, 64)), Ok(Opcode::WriteHbm));
        assert_eq!(v(cl(1, 0, 0x10, 0)), Err(E::Align));
        assert_eq!(v(cl(1, 0, 0x20, 0)), Err(E::Size));
        // WRITE and READ ignore the slot byte.
        assert_eq!(v(cl(1, 200, 0x20, 1)), Ok(Opcode::WriteHbm));
        assert_eq!(v(cl(2, 200, 0x20, 64)), Ok(Opcode::ReadHbm));
        assert_eq!(v(cl(2, 0, 0x20, 65)), Err(E::Size));
        assert_eq!(v(cl(2, 0, 0x20, 1)), Ok(Opcode::ReadHbm));
        // RECONF: size % 4 before slot.
        assert_eq!(v(cl(3, 4, 0x4000, 6)), Err(E::Size));
        assert_eq!(v(cl(3, 4, 0x4000, 8)), Err(E::Slot));
        assert_eq!(v(cl(3, 3, 0x4000, 8)), Ok(Opcode::ReconfIcap));
        assert_eq!(v(cl(3, 4, 0x4001, 6)), Err(E::Align));
    }

    #[test]
    fn body_decoding() {
        assert_eq!(
            ControllerRequest::decode_body(&[0; 63]),
            Err(ProtoError::MissingCommandLine { len: 63 })
        );
        let mut body = cl(1, 0, 0x40, 100).encode().to_vec();
        body.extend(hex("01x64"));
        assert_eq!(
            ControllerRequest::decode_body(&body),
            Err(ProtoError::WritePayloadShort {
                count: 100,
                available: 64
            })
        );
        body.extend(hex("02x64 | 03x64"));
        assert_eq!(
            ControllerRequest::decode_body(&body),
            Ok(ControllerCommand::Valid(ControllerRequest::WriteHbm {
                addr: 0x40,
                data: hex("01x64 02x36"),
            }))
        );
        let bad = cl(3, 7, 0x40, 8);
        assert_eq!(
            ControllerRequest::decode_body(&bad.encode()),
            Ok(ControllerCommand::Rejected {
                command: bad,
                code: ErrorCode::Slot
            })
        );
        let header = RequestHeader::accelerator(1, 128, Flags::FIRST_LAST);
        assert_eq!(
            ControllerRequest::from_request(&header, &bad.encode()),
            Err(ProtoError::NotController { workload: 1 })
        );
    }

    #[test]
    fn requests_round_trip_through_reassembly() {
        let cmds = [
            ControllerRequest::WriteHbm {
                addr: 0x1000_4000,
                data: (0..=255).collect(),
            },
            ControllerRequest::WriteHbm {
                addr: 0,
                data: vec![9; 1],
            },
            ControllerRequest::ReadHbm {
                addr: 0x60,
                len: 17,
            },
            ControllerRequest::ReconfIcap {
                slot: 3,
                addr: 0x1000_4000,
                len: 3_139_996,
            },
            ControllerRequest::QueryStatus,
        ];
        let stream: Vec<u8> = cmds.iter().flat_map(ControllerRequest::encode).collect();
        let reqs = ok_requests(Reassembler::new().feed(&stream));
        assert_eq!(reqs.len(), cmds.len());
        for (req, cmd) in reqs.iter().zip(&cmds) {
            assert_eq!(req.header.flags(), Flags::FIRST_LAST);
            assert_eq!(
                ControllerRequest::from_request(&req.header, &req.payload),
                Ok(ControllerCommand::Valid(cmd.clone()))
            );
            assert_eq!(cmd.validate(), Ok(()));
        }
    }

    #[test]
    fn status_line_decoding_is_strict() {
        assert_eq!(
            ControllerResponse::decode_status(&line("03 00x63")),
            Ok(ErrorCode::Size)
        );
        assert_eq!(
            ControllerResponse::decode_status(&line("00x10 01 00x53")),
            Err(ProtoError::StatusNotZero {
                offset: 10,
                byte: 1
            })
        );
        assert_eq!(
            ControllerResponse::decode_status(&line("0a 00x63")),
            Err(ProtoError::UnknownErrorCode { code: 10 })
        );
        for code in 0..=9u8 {
            let e = ErrorCode::from_u8(code).expect("known");
            assert_eq!(e as u8, code);
            let mut l = [0u8; 64];
            l[0] = code;
            assert_eq!(ControllerResponse::Status(e).encode(), l);
        }
    }

    #[test]
    fn query_line_golden_and_round_trip() {
        let q = QueryStatus {
            query_result: ErrorCode::Ok,
            reconf_active: false,
            last_slot_id: 2,
            last_error: ErrorCode::Icap,
            icap_avail: true,
            prdone_seen: false,
            prerror_seen: true,
            last_cycles: 123_456,
            active_cycles: 0x0102,
        };
        let expected =
            line("00 00 02 09 01 00 01 00 | 40 e2 01 00 00 00 00 00 | 02 01 00x6 | 00x40");
        assert_eq!(q.encode(), expected);
        assert_eq!(ControllerResponse::Query(q).encode(), expected);
        assert_eq!(QueryStatus::decode(&expected), Ok(q));
        assert_eq!(q.last_reconf_ns(), 617_280);
        let sent = ControllerRequest::QueryStatus.command_line();
        assert_eq!(
            ControllerResponse::decode(&sent, &expected),
            Ok(ControllerResponse::Query(q))
        );
        let mut bad = expected;
        bad[5] = 2;
        assert_eq!(
            QueryStatus::decode(&bad),
            Err(ProtoError::QueryFlag { offset: 5, byte: 2 })
        );
        let mut bad = expected;
        bad[3] = 0x20;
        assert_eq!(
            QueryStatus::decode(&bad),
            Err(ProtoError::UnknownErrorCode { code: 0x20 })
        );
    }

    #[test]
    fn read_answers() {
        let data = ControllerResponse::read_data(&hex("11 22 33"));
        assert_eq!(data.encode(), line("11 22 33 00x61"));
        let valid = ControllerRequest::ReadHbm { addr: 0x20, len: 3 }.command_line();
        assert_eq!(
            ControllerResponse::decode(&valid, &line("11 22 33 00x61")),
            Ok(data)
        );
        // An invalid read is answered by a status line.
        let unaligned = ControllerRequest::ReadHbm { addr: 0x21, len: 3 }.command_line();
        assert_eq!(
            ControllerResponse::decode(&unaligned, &line("02 00x63")),
            Ok(ControllerResponse::Status(ErrorCode::Align))
        );
        let unknown = cl(9, 0, 0, 0);
        assert_eq!(
            ControllerResponse::decode(&unknown, &line("01 00x63")),
            Ok(ControllerResponse::Status(ErrorCode::Opcode))
        );
    }
}

mod reconf {
    use super::*;

    #[test]
    fn small_partial_default_options() {
        let bits: Vec<u8> = (0..1001u32).map(|i| (i % 251) as u8).collect();
        let plan = reconf_upload(&bits, ReconfOptions::new(2)).expect("valid");
        assert_eq!(plan.padded_len(), 1004);
        assert_eq!(plan.write_count(), 4);
        assert_eq!(plan.len(), 6);
        let reqs: Vec<ControllerRequest> = plan.collect();
        let mut staged = Vec::new();
        for (i, req) in reqs[..4].iter().enumerate() {
            let ControllerRequest::WriteHbm { addr, data } = req else {
                panic!("expected WRITE_HBM, got {req:?}");
            };
            assert_eq!(*addr, 0x1000_4000 + 256 * i as u64);
            assert_eq!(data.len(), if i < 3 { 256 } else { 236 });
            // 64 header + 64 command + 256 payload = 384 TCP bytes each.
            assert_eq!(req.encode().len(), 384);
            assert_eq!(req.validate(), Ok(()));
            staged.extend_from_slice(data);
        }
        assert_eq!(&staged[..1001], &bits[..]);
        assert_eq!(&staged[1001..], &[0, 0, 0]);
        assert_eq!(
            reqs[4],
            ControllerRequest::ReconfIcap {
                slot: 2,
                addr: 0x1000_4000,
                len: 1004
            }
        );
        assert_eq!(reqs[5], ControllerRequest::QueryStatus);
        // First write, golden: declared 320 = 64 command + 256 payload.
        assert_eq!(
            &reqs[0].encode()[..88],
            &hex("ffx56 40 01 00 00 ff ff ab 00 | 01 00x7 | 00 40 00 10 00 00 00 00 | 00 01 00x6")
                [..]
        );
    }

    #[test]
    fn real_partial_size_and_chunk_sizes() {
        let bits = vec![0u8; 3_139_996];
        let plan = reconf_upload(&bits, ReconfOptions::new(0)).expect("valid");
        assert_eq!(plan.write_count(), 12_266);
        assert_eq!(plan.len(), 12_268);
        for chunk_size in [64, 128, 192, 256] {
            let opts = ReconfOptions {
                chunk_size,
                query_status: false,
                ..ReconfOptions::new(1)
            };
            let plan = reconf_upload(&bits[..1000], opts).expect("valid");
            assert_eq!(plan.write_count(), 1000usize.div_ceil(chunk_size));
            let last = plan.last().expect("nonempty");
            assert_eq!(
                last,
                ControllerRequest::ReconfIcap {
                    slot: 1,
                    addr: 0x1000_4000,
                    len: 1000
                }
            );
        }
    }

    #[test]
    fn rejects_bad_options() {
        let bits = [1u8; 16];
        let with = |f: fn(&mut ReconfOptions)| {
            let mut o = ReconfOptions::new(0);
            f(&mut o);
            reconf_upload(&bits, o).map(|p| p.len())
        };
        for bad in [0, 32, 100, 320, 512] {
            let mut o = ReconfOptions::new(0);
            o.chunk_size = bad;
            assert_eq!(
                reconf_upload(&bits, o).map(|p| p.len()),
                Err(ProtoError::ChunkSize { chunk_size: bad })
            );
        }
        assert_eq!(with(|o| o.slot = 4), Err(ProtoError::Slot { slot: 4 }));
        assert_eq!(
            with(|o| o.hbm_addr = 0x1000_4010),
            Err(ProtoError::HbmRange {
                addr: 0x1000_4010,
                len: 16
            })
        );
        assert_eq!(
            with(|o| o.hbm_addr = 1 << 33),
            Err(ProtoError::HbmRange {
                addr: 1 << 33,
                len: 16
            })
        );
        assert_eq!(
            with(|o| o.hbm_addr = 0xffff_ffff_ffff_ffe0),
            Err(ProtoError::HbmRange {
                addr: 0xffff_ffff_ffff_ffe0,
                len: 16
            })
        );
        assert_eq!(with(|o| o.hbm_addr = (1 << 33) - 32), Ok(3));
        assert_eq!(
            reconf_upload(&[], ReconfOptions::new(0)).map(|p| p.len()),
            Err(ProtoError::EmptyBitstream)
        );
    }
}

mod framing {
    use super::*;

    #[test]
    fn last_flag_rule_and_top_config() {
        assert_eq!(FracFraming::new(0, 1024, 1024).flags(), Flags::FIRST_LAST);
        assert_eq!(FracFraming::new(0, 1024, 4096).flags(), Flags::FIRST_LAST);
        assert_eq!(FracFraming::new(0, 1088, 1024).flags(), Flags::FIRST);
        let custom = FracFraming {
            top_config: 0x1234,
            ..FracFraming::new(3, 128, 64)
        };
        assert_eq!(custom.header().map(|h| h.top_config), Ok(0x1235));
        let custom = FracFraming {
            top_config: 0x1234,
            ..FracFraming::new(3, 128, 128)
        };
        assert_eq!(custom.header().map(|h| h.top_config), Ok(0x1237));
        // Other workload ids are allowed; they route to slot 0.
        assert_eq!(
            FracFraming::new(7, 64, 64).header().map(|h| h.route()),
            Ok(Route::Slot(0))
        );
    }

    #[test]
    fn pieces_header_only_in_first() {
        let framed = FracFraming::new(1, 4096, 1536).build().expect("valid");
        let sizes: Vec<usize> = framed.pieces().map(<[u8]>::len).collect();
        assert_eq!(sizes, vec![1536, 1536, 1024]);
        assert_eq!(framed.piece_count(), 3);
        let pieces: Vec<&[u8]> = framed.pieces().collect();
        assert_eq!(&pieces[0][..56], &hex("ffx56")[..]);
        assert!(pieces[0][64..].iter().all(|&b| b == 0x9f));
        assert!(pieces[1].iter().chain(pieces[2]).all(|&b| b == 0x9f));
        assert_eq!(framed.clone().into_bytes().len(), 4096);
    }

    #[test]
    fn rejects_bad_parameters() {
        let b = |w, x, m| FracFraming::new(w, x, m).build().map(|f| f.bytes().len());
        assert_eq!(
            b(CONTROLLER_WORKLOAD, 128, 128),
            Err(ProtoError::ReservedWorkload)
        );
        assert_eq!(b(0, 128, 0), Err(ProtoError::PieceSize { piece_size: 0 }));
        assert_eq!(
            b(0, 128, 100),
            Err(ProtoError::PieceSize { piece_size: 100 })
        );
        assert_eq!(
            b(0, 100, 64),
            Err(ProtoError::SizeNotWholeLines { declared: 100 })
        );
        assert_eq!(
            b(0, 0, 64),
            Err(ProtoError::SizeTooSmall {
                declared: 0,
                minimum: 64,
                route: Route::Slot(0)
            })
        );
        assert_eq!(b(0, 65_472, 8192), Ok(65_472));
        assert_eq!(
            b(0, 65_536, 8192),
            Err(ProtoError::SizeTooLarge { wire_size: 65_536 })
        );
        assert_eq!(
            FracFraming::new(0, 192, 64).build_with_payload(&[0; 64]),
            Err(ProtoError::PayloadLength {
                expected: 128,
                actual: 64
            })
        );
    }

    #[test]
    fn test_info_golden_and_round_trip() {
        // -t rr -m 1024 -X 1024 -R 64 -Z 0 -F 1, default flags (zero-copy write).
        let ti = TestInfo::rr(1024, 1024, 64, 1);
        let expected = line(
            "02 00 00 00 | 00 04 00 00 | 02 00 00 00 | 00 00 00 00 | \
             40 00 00 00 | 01 00 00 00 | 00 04 00 00 | 00x36",
        );
        assert_eq!(ti.encode(), expected);
        assert_eq!(TestInfo::decode(&expected), Ok(ti));
        let other = TestInfo {
            test: TestMode::Crr,
            integrity_enabled: true,
            enable_zwrite: false,
            integrity_off: 0xdead_beef,
            ..TestInfo::rr(4096, 4096, 4096, 5)
        };
        assert_eq!(TestInfo::decode(&other.encode()), Ok(other));
        assert_eq!(&other.encode()[8..16], &hex("01 00 00 00 ef be ad de")[..]);
        let mut bad = expected;
        bad[0] = 5;
        assert_eq!(
            TestInfo::decode(&bad),
            Err(ProtoError::UnknownTestMode { value: 5 })
        );
    }
}

mod responses {
    use super::*;

    #[test]
    fn sizes_per_unit() {
        assert_eq!(Unit::TopK.response_size(4096), Some(64));
        assert_eq!(Unit::TopK.response_size(64), Some(64));
        assert_eq!(Unit::Cnn.response_size(24_640), Some(64));
        assert_eq!(Unit::Log.response_size(1024), Some(960));
        assert_eq!(Unit::Log.response_size(64), Some(0));
        assert_eq!(Unit::Norm.response_size(1024), Some(960));
        assert_eq!(Unit::Norm.response_size(64), Some(0));
        assert_eq!(Unit::Norm.response_size(16_448), Some(16_384));
        assert_eq!(Unit::Norm.response_size(16_512), None);
        assert_eq!(Unit::Pattern.response_size(4096), Some(4096));
        assert_eq!(Unit::Or.response_size(128), Some(128));
    }

    #[test]
    fn function_ids() {
        assert_eq!(Unit::TopK.function_id(), Some(1));
        assert_eq!(Unit::Cnn.function_id(), Some(2));
        assert_eq!(Unit::Log.function_id(), Some(3));
        assert_eq!(Unit::Norm.function_id(), Some(5));
        assert_eq!(Unit::from_function_id(4), None);
        for u in Unit::ALL {
            if let Some(id) = u.function_id() {
                assert_eq!(Unit::from_function_id(id), Some(u));
            }
        }
        assert_eq!(LINE, 64);
    }
}
