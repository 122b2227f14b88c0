//! The bootstrap wire format from the outside: the exact bytes a frame is made
//! of (so a rank and a coordinator built separately agree), the bounds a reader
//! enforces at their exact edges, and which kind of error each bad frame gives.

use hpc_runtime::wire::{frame, read_msg, write_msg, Msg, Op, ReadError, MAX_FRAME};
use hpc_runtime::Error;

fn read(bytes: &[u8]) -> Result<Msg, ReadError> {
    read_msg(&mut &bytes[..])
}

fn is_protocol(r: Result<Msg, ReadError>) -> bool {
    matches!(r, Err(ReadError::Protocol(Error::Protocol(_))))
}

fn is_eof(r: Result<Msg, ReadError>) -> bool {
    matches!(r, Err(ReadError::Io(e)) if e.kind() == std::io::ErrorKind::UnexpectedEof)
}

/// The documented layout, byte for byte: `u32` LE length, kind byte, LE
/// integers, byte strings as `u32` LE length + bytes.
#[test]
fn frames_have_the_documented_layout() {
    let hello = Msg::Hello {
        rank: 2,
        size: 0x0102_0304,
        secret: 0x1122_3344_5566_7788,
        node: "n1".into(),
        pid: 7,
    };
    let body: Vec<u8> = [
        &[1u8][..],
        &[2, 0, 0, 0],
        &[4, 3, 2, 1],
        &[0x88, 0x77, 0x66, 0x55, 0x44, 0x33, 0x22, 0x11],
        &[2, 0, 0, 0, b'n', b'1'],
        &[7, 0, 0, 0],
    ]
    .concat();
    assert_eq!(hello.encode(), body);
    let mut want = (body.len() as u32).to_le_bytes().to_vec();
    want.extend_from_slice(&body);
    assert_eq!(frame(&hello).unwrap(), want);
    let mut written = Vec::new();
    write_msg(&mut written, &hello).unwrap();
    assert_eq!(written, want);

    // One of each remaining kind, with its kind byte and fields.
    let cases: Vec<(Msg, Vec<u8>)> = vec![
        (
            Msg::Welcome {
                nodes: vec!["a".into()],
            },
            vec![2, 1, 0, 0, 0, 1, 0, 0, 0, b'a'],
        ),
        (
            Msg::Contribute {
                seq: 3,
                op: Op::Broadcast { root: 5 },
                data: vec![9],
            },
            vec![3, 3, 0, 0, 0, 0, 0, 0, 0, 1, 5, 0, 0, 0, 1, 0, 0, 0, 9],
        ),
        (
            Msg::Contribute {
                seq: 1,
                op: Op::Allgather,
                data: vec![],
            },
            vec![3, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0],
        ),
        (
            Msg::Contribute {
                seq: 1,
                op: Op::Barrier,
                data: vec![],
            },
            vec![3, 1, 0, 0, 0, 0, 0, 0, 0, 2, 0, 0, 0, 0],
        ),
        (
            Msg::Result {
                seq: 2,
                parts: vec![vec![8]],
            },
            vec![4, 2, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 1, 0, 0, 0, 8],
        ),
        (
            Msg::Abort {
                rank: 1,
                cause: "x".into(),
            },
            vec![5, 1, 0, 0, 0, 1, 0, 0, 0, b'x'],
        ),
        (
            Msg::Timeout {
                op: "b".into(),
                after_ms: 256,
                missing: vec![4],
            },
            vec![
                6, 1, 0, 0, 0, b'b', 0, 1, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 4, 0, 0, 0,
            ],
        ),
        (
            Msg::Mismatch { detail: "d".into() },
            vec![7, 1, 0, 0, 0, b'd'],
        ),
        (Msg::Goodbye, vec![8]),
    ];
    for (msg, body) in cases {
        assert_eq!(msg.encode(), body, "{msg:?}");
        assert_eq!(Msg::decode(&body).unwrap(), msg);
    }
}

/// A list whose items exactly fill the rest of the frame is accepted (the
/// count bound is "no more than fits", not "fewer than fits").
#[test]
fn lists_that_exactly_fill_the_frame_decode() {
    for msg in [
        Msg::Welcome {
            nodes: vec![String::new()],
        },
        Msg::Welcome {
            nodes: vec![String::new(); 3],
        },
        Msg::Result {
            seq: 1,
            parts: vec![vec![], vec![]],
        },
        Msg::Timeout {
            op: String::new(),
            after_ms: 0,
            missing: vec![9],
        },
        Msg::Timeout {
            op: "allgather".into(),
            after_ms: u64::MAX,
            missing: vec![0, u32::MAX],
        },
    ] {
        let f = frame(&msg).unwrap();
        assert_eq!(read(&f).unwrap(), msg);
    }
    // One item more than the frame can hold is refused before any allocation.
    assert!(is_protocol(read(&frame_of(&[2, 2, 0, 0, 0, 0, 0, 0, 0]))));
}

fn frame_of(body: &[u8]) -> Vec<u8> {
    let mut f = (body.len() as u32).to_le_bytes().to_vec();
    f.extend_from_slice(body);
    f
}

/// The frame length bound, at its edges: an empty frame and one over
/// `MAX_FRAME` are protocol errors; a frame of exactly `MAX_FRAME` is allowed
/// and, cut short, is an end-of-file error, as is any frame whose body ends
/// early, even one whose first bytes would decode.
#[test]
fn frame_length_bounds_and_short_bodies() {
    assert_eq!(MAX_FRAME, 256 * 1024 * 1024);
    assert!(is_protocol(read(&[0, 0, 0, 0])));
    assert!(is_protocol(read(&((MAX_FRAME + 1) as u32).to_le_bytes())));
    assert!(is_protocol(read(&u32::MAX.to_le_bytes())));
    let mut at_max = (MAX_FRAME as u32).to_le_bytes().to_vec();
    at_max.push(8);
    assert!(is_eof(read(&at_max)));

    // A Goodbye (complete in its first byte) announced as two bytes long.
    assert!(is_eof(read(&[2, 0, 0, 0, 8])));
    let whole = frame(&Msg::Abort {
        rank: 1,
        cause: "gone".into(),
    })
    .unwrap();
    for cut in 4..whole.len() {
        assert!(is_eof(read(&whole[..cut])), "cut at {cut}");
    }
    assert!(is_eof(read(&[1, 0])), "a cut length prefix");
    // A frame followed by another reads just the first.
    let mut two = frame(&Msg::Goodbye).unwrap();
    two.extend_from_slice(&frame(&Msg::Mismatch { detail: "m".into() }).unwrap());
    let mut r = &two[..];
    assert_eq!(read_msg(&mut r).unwrap(), Msg::Goodbye);
    assert_eq!(
        read_msg(&mut r).unwrap(),
        Msg::Mismatch { detail: "m".into() }
    );
}

#[test]
fn bad_bodies_are_protocol_errors() {
    // Unknown message kind, unknown collective kind, invalid UTF-8, trailing byte.
    for body in [
        &[0u8][..],
        &[9],
        &[3, 0, 0, 0, 0, 0, 0, 0, 0, 3, 0, 0, 0, 0],
        &[7, 1, 0, 0, 0, 0xff],
        &[8, 0],
    ] {
        assert!(is_protocol(read(&frame_of(body))), "{body:?}");
    }
}

#[test]
fn operations_have_names() {
    assert_eq!(Op::Allgather.name(), "allgather");
    assert_eq!(Op::Broadcast { root: 3 }.name(), "broadcast(root=3)");
    assert_eq!(Op::Barrier.name(), "barrier");
}
