//! The device's side of the wire: the byte-stream and segment reassemblers, and the controller's decoders.

use fracflow_proto::{
    CommandLine, ControllerCommand, ControllerRequest, ControllerResponse, HEADER_LEN, LINE,
    ProtoError, QueryStatus, Reassembler, Request, RequestHeader, SegmentReassembler, TestInfo,
};

use crate::Input;

/// One outcome of the byte-stream reassembler, comparable across runs.
type Outcome = Result<Request, ProtoError>;

/// Feeds `stream` in one piece through [`Reassembler::advance`], checking that each outcome accounts for exactly
/// the bytes it consumed: a request re-encodes to them, a rejected header line is one 64-byte line, and what is
/// left over is what the machine says it buffers.
fn reassemble_whole(stream: &[u8]) -> (Vec<Outcome>, usize) {
    let mut machine = Reassembler::new();
    let mut outcomes = Vec::new();
    let mut at = 0;
    let mut unit_start = 0;
    while at < stream.len() {
        let (used, outcome) = machine.advance(&stream[at..]);
        assert!(used > 0, "advance consumed nothing of a nonempty input");
        at += used;
        if let Some(outcome) = outcome {
            let span = &stream[unit_start..at];
            match &outcome {
                Ok(request) => {
                    assert_eq!(
                        request.wire_bytes(),
                        span,
                        "a request re-encodes to other bytes than it came from"
                    );
                    assert_eq!(request.payload.len() as u64, request.header.body_len());
                    assert_eq!(
                        RequestHeader::decode(&request.header.encode()).as_ref(),
                        Ok(&request.header)
                    );
                }
                Err(_) => assert_eq!(span.len(), HEADER_LEN, "a rejected header is not one line"),
            }
            unit_start = at;
            outcomes.push(outcome);
        }
    }
    assert_eq!(
        machine.buffered(),
        stream.len() - unit_start,
        "the machine buffers other bytes than those after its last outcome"
    );
    assert_eq!(machine.is_idle(), unit_start == stream.len());
    (outcomes, machine.buffered())
}

/// The byte-stream reassembler's output does not depend on how the stream is split: the input's first byte is
/// a number of cuts, the next two bytes per cut their positions, the rest the stream. Fed in those pieces, it
/// must give the same requests and errors, and buffer the same bytes, as fed whole. The same pieces then go to
/// the segment reassembler as TCP segments, which must deliver only requests whose headers decode and whose
/// payload is the declared size (or empty, after a header-only `FIRST|LAST` segment).
pub fn proto_reassembly(data: &[u8]) {
    let mut input = Input::new(data);
    let cut_count = usize::from(input.byte() % 16);
    let mut cuts: Vec<usize> = (0..cut_count).map(|_| usize::from(input.u16())).collect();
    let stream = input.rest();
    for cut in &mut cuts {
        *cut = if stream.is_empty() {
            0
        } else {
            *cut % (stream.len() + 1)
        };
    }
    cuts.sort_unstable();
    let (whole, buffered) = reassemble_whole(stream);

    let mut machine = Reassembler::new();
    let mut split = Vec::new();
    let mut pieces = Vec::new();
    let mut from = 0;
    for &cut in cuts.iter().chain(std::iter::once(&stream.len())) {
        let piece = &stream[from..cut];
        split.extend(machine.feed(piece));
        pieces.push(piece);
        from = cut;
    }
    assert_eq!(
        split, whole,
        "split at {cuts:?} the stream gives other outcomes than whole"
    );
    assert_eq!(machine.buffered(), buffered);

    let mut segments = SegmentReassembler::new();
    for piece in pieces {
        match segments.feed_segment(piece) {
            Ok(Some(request)) => {
                assert!(RequestHeader::decode(&request.header.encode()).is_ok());
                let header_only_end =
                    request.payload.is_empty() && request.header.flags().is_last();
                assert!(
                    header_only_end || request.payload.len() as u64 == request.header.body_len(),
                    "a segment request's payload is neither empty after FIRST|LAST nor the declared size"
                );
            }
            Ok(None) => assert!(!segments.is_idle()),
            Err(_) => {}
        }
    }
}

/// The controller's decoders and their encoders agree: a body that decodes to a valid command re-encodes to a
/// body that decodes to the same command; a rejected one carries the code its command line's validation gives;
/// and every 64-byte line decoded as a header, command line, query-status line, status answer or fperf test
/// header re-encodes to bytes that decode to the same value (the header and command line, which keep every
/// field, to the same bytes).
pub fn proto_controller(data: &[u8]) {
    match ControllerRequest::decode_body(data) {
        Ok(ControllerCommand::Valid(request)) => {
            assert_eq!(request.validate(), Ok(()));
            let again = ControllerRequest::decode_body(&request.body());
            assert_eq!(again, Ok(ControllerCommand::Valid(request.clone())));
            let encoded = request.encode();
            let header_line: [u8; HEADER_LEN] = first_line(&encoded);
            let header = RequestHeader::decode(&header_line)
                .unwrap_or_else(|e| panic!("a valid command's header does not decode: {e}"));
            assert_eq!(
                ControllerRequest::from_request(&header, &encoded[HEADER_LEN..]),
                Ok(ControllerCommand::Valid(request))
            );
        }
        Ok(ControllerCommand::Rejected { command, code }) => {
            assert_eq!(command.validate(), Err(code));
        }
        Err(ProtoError::MissingCommandLine { len }) => assert!(len < LINE && len == data.len()),
        Err(ProtoError::WritePayloadShort { count, available }) => {
            assert!((available as u64) < count && available == data.len() - LINE);
        }
        Err(other) => panic!("a body fails with an error no body can cause: {other}"),
    }
    for chunk in data.chunks_exact(LINE) {
        let line: [u8; LINE] = first_line(chunk);
        if let Ok(header) = RequestHeader::decode(&line) {
            assert_eq!(
                header.encode(),
                line,
                "a decoded header re-encodes differently"
            );
        }
        let command = CommandLine::decode(&line);
        assert_eq!(CommandLine::decode(&command.encode()), command);
        if let Ok(status) = QueryStatus::decode(&line) {
            assert_eq!(QueryStatus::decode(&status.encode()), Ok(status));
        }
        if let Ok(response) = ControllerResponse::decode(&command, &line) {
            assert_eq!(
                ControllerResponse::decode(&command, &response.encode()),
                Ok(response)
            );
        }
        if let Ok(info) = TestInfo::decode(&line) {
            assert_eq!(TestInfo::decode(&info.encode()), Ok(info));
        }
    }
}

/// The first 64 bytes of a slice known to hold at least that many.
fn first_line(bytes: &[u8]) -> [u8; LINE] {
    let mut line = [0u8; LINE];
    line.copy_from_slice(&bytes[..LINE]);
    line
}
