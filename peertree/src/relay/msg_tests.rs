//! Tests of the relay's wire messages: job ids, encoding limits, routing and the chunk
//! bitsets' wire form.

use super::*;

/// `teesfs status --job 1234` read the Slurm job id as hex (job 0x1234).
#[test]
fn job_ids_read_as_slurm_decimal_display_hex_or_0x() {
    let read = |t: &str| t.parse::<JobId>();
    assert_eq!(read("1234"), Ok(JobId(1234)));
    assert_eq!(read(" 1234\n"), Ok(JobId(1234)));
    assert_eq!(read("4294967295"), Ok(JobId(u32::MAX as u64)));
    assert_eq!(read("00000000000004d2"), Ok(JobId(1234)));
    assert_eq!(
        read("0000000000001234"),
        Ok(JobId(0x1234)),
        "16 chars: display"
    );
    assert_eq!(read("0x4d2"), Ok(JobId(1234)));
    assert_eq!(read("0X4D2"), Ok(JobId(1234)));
    assert_eq!(read(&JobId(u64::MAX).to_string()), Ok(JobId(u64::MAX)));
    // Issue 30 item 9: a Slurm job shows as its number, in paths and output alike.
    assert_eq!(JobId(4242).to_string(), "4242");
    assert_eq!(JobId(u64::from(u32::MAX)).to_string(), "4294967295");
    assert_eq!(JobId(1 << 32).to_string(), "0000000100000000");
    assert_eq!(JobId(4242).hex(), "0000000000001092");
    for j in [
        0,
        7,
        4242,
        u64::from(u32::MAX),
        1 << 32,
        1 << 63 | 5,
        u64::MAX,
    ] {
        assert_eq!(read(&JobId(j).to_string()), Ok(JobId(j)), "round trip {j}");
        assert_eq!(read(&JobId(j).hex()), Ok(JobId(j)), "hex round trip {j}");
    }
    for bad in [
        "",
        "4d2",
        "0x",
        "0xzz",
        "-1",
        "12 34",
        "0x00000000000000001",
    ] {
        let e = read(bad).expect_err(bad).to_string();
        assert!(
            e.contains("decimal") && e.contains(bad.trim()),
            "{bad:?}: {e}"
        );
    }
}

/// Each message goes to exactly one place: `Start` and `Prepare` to the daemon, chunks
/// to the job, and the rest to the relay unchanged.
#[test]
fn every_message_routes_to_one_place() {
    let data = vec![1, 2, 3];
    let chunk = Msg::Chunk {
        chunk: ChunkNo(7),
        demand: true,
        data: data.clone(),
    };
    assert_eq!(
        chunk.route(),
        Routed::Chunk {
            chunk: ChunkNo(7),
            demand: true,
            data: data.into()
        }
    );
    let prepare = Prepare {
        subtree: Vec::new(),
    };
    assert_eq!(
        Msg::Prepare(prepare.clone()).route(),
        Routed::Prepare(prepare)
    );
    for (msg, relay) in [
        (
            Msg::Want { chunk: ChunkNo(3) },
            RelayMsg::Want { chunk: ChunkNo(3) },
        ),
        (
            Msg::Lost { chunk: ChunkNo(4) },
            RelayMsg::Lost { chunk: ChunkNo(4) },
        ),
        (Msg::Ping, RelayMsg::Ping),
        (Msg::Adopted, RelayMsg::Adopted),
        (Msg::Finished, RelayMsg::Finished),
        (Msg::Release, RelayMsg::Release),
        (
            Msg::Attach { have: vec![5] },
            RelayMsg::Attach { have: vec![5] },
        ),
        (
            Msg::Held { have: vec![6] },
            RelayMsg::Held { have: vec![6] },
        ),
        (
            Msg::Report(Report::default()),
            RelayMsg::Report(Report::default()),
        ),
    ] {
        assert_eq!(msg.route(), Routed::Relay(relay));
    }
    let reply = "login:7411".to_string();
    assert_eq!(
        Msg::AskRecord {
            reply: reply.clone()
        }
        .route(),
        Routed::AskRecord { reply }
    );
    let json = b"{}".to_vec();
    assert_eq!(
        Msg::Record { json: json.clone() }.route(),
        Routed::Record { json }
    );
}

/// The messages as they were encoded before `data` and `index` became byte strings
/// (with the fields added since, which are not byte strings).
#[derive(Serialize)]
enum OldMsg {
    Start(Box<OldStart>),
    Chunk {
        chunk: u32,
        demand: bool,
        data: Vec<u8>,
    },
}

#[derive(Serialize)]
struct OldStart {
    job: JobId,
    index: Vec<u8>,
    order: Vec<u32>,
    urgent: u32,
    subtree: Vec<NodeInfo>,
    ancestors: Vec<NodeInfo>,
    timing: Timing,
    shared_store: Option<String>,
    probe: bool,
    owner: Option<u32>,
    kin: Vec<NodeInfo>,
    root_clock_ms: Option<u64>,
}

#[test]
fn byte_fields_keep_the_wire_format() {
    let data: Vec<u8> = (0..300u32).map(|i| (i * 7) as u8).collect();
    let old = postcard::to_allocvec(&OldMsg::Chunk {
        chunk: 3,
        demand: false,
        data: data.clone(),
    })
    .expect("encode");
    let new = Msg::Chunk {
        chunk: ChunkNo(3),
        demand: false,
        data,
    };
    assert_eq!(new.encode(), old);
    assert_eq!(Msg::decode(&old).expect("decode"), new);

    let node = NodeInfo {
        id: NodeId(1),
        host: "n01".into(),
        addr: "127.0.0.1:1".into(),
        parent: NodeId(0),
        group: Some(2),
        rate: Some(100_000_000),
    };
    let old = postcard::to_allocvec(&OldMsg::Start(Box::new(OldStart {
        job: JobId(9),
        index: vec![5; 200],
        order: vec![(ChunkNo(0)).0, (ChunkNo(1)).0],
        urgent: 1,
        subtree: vec![node.clone()],
        ancestors: vec![],
        timing: Timing::default(),
        shared_store: None,
        probe: false,
        owner: Some(1000),
        kin: vec![node.clone()],
        root_clock_ms: Some(1_700_000_000_000),
    })))
    .expect("encode");
    let new = Msg::Start(Box::new(Start {
        job: JobId(9),
        index: vec![5; 200],
        order: vec![ChunkNo(0), ChunkNo(1)],
        urgent: 1,
        subtree: vec![node.clone()],
        ancestors: vec![],
        timing: Timing::default(),
        shared_store: None,
        probe: false,
        owner: Some(1000),
        kin: vec![node],
        root_clock_ms: Some(1_700_000_000_000),
    }));
    assert_eq!(new.encode(), old);
    assert_eq!(Msg::decode(&old).expect("decode"), new);
}

#[test]
fn messages_round_trip() {
    let msgs = [
        Msg::Chunk {
            chunk: ChunkNo(7),
            demand: true,
            data: vec![1, 2, 3],
        },
        Msg::Want { chunk: ChunkNo(9) },
        Msg::Lost { chunk: ChunkNo(9) },
        Msg::Report(Report {
            done: vec![(NodeId(3), Phase::All)],
            failed: vec![(NodeId(1), NodeId(2))],
            edge_rtt: vec![(NodeId(0), NodeId(1), 1234)],
            ..Report::default()
        }),
        Msg::Attach {
            have: vec![u64::MAX, 5],
        },
        Msg::Finished,
        Msg::Release,
        Msg::Prepare(Prepare {
            subtree: vec![NodeInfo {
                id: NodeId(4),
                host: "cn4".into(),
                addr: "10.0.0.4:7070".into(),
                parent: NodeId(1),
                group: None,
                rate: None,
            }],
        }),
        Msg::AskRecord {
            reply: "10.0.0.1:7411".into(),
        },
        Msg::Record {
            json: b"{\"job\": \"1\"}".to_vec(),
        },
    ];
    for m in msgs {
        assert_eq!(Msg::decode(&m.encode()).expect("valid"), m);
    }
}

/// A chunk frame sent as a head and shared stored bytes, and taken apart without
/// copying them, is the same on the wire as the encoded message.
#[test]
fn chunk_heads_and_splits_agree_with_the_encoding() {
    for (chunk, demand, len) in [(0, false, 0), (7, true, 3), (300_000, false, 1 << 20)] {
        let data: Vec<u8> = (0..len).map(|i| (i * 13 % 251) as u8).collect();
        let chunk = ChunkNo(chunk);
        let msg = Msg::Chunk {
            chunk,
            demand,
            data: data.clone(),
        };
        let encoded = msg.encode();
        let mut sent = Msg::chunk_head(chunk, demand, len);
        sent.extend_from_slice(&data);
        assert_eq!(sent, encoded);
        let split = Msg::split_chunk(&encoded)
            .expect("a chunk message")
            .expect("well formed");
        assert_eq!((split.chunk, split.demand), (chunk, demand));
        assert_eq!(&encoded[split.data], &data[..]);
    }
    assert!(Msg::split_chunk(&Msg::Ping.encode()).is_none());
    assert!(Msg::split_chunk(&Msg::Want { chunk: ChunkNo(1) }.encode()).is_none());
    let mut short = Msg::chunk_head(ChunkNo(1), false, 10);
    short.extend_from_slice(&[0; 9]);
    assert!(matches!(
        Msg::split_chunk(&short),
        Some(Err(Error::WireMalformed(_)))
    ));
    assert!(Msg::decode(&short).is_err(), "refused by both");
    let mut long = Msg::chunk_head(ChunkNo(1), false, 10);
    long.extend_from_slice(&[0; 11]);
    assert!(matches!(
        Msg::split_chunk(&long),
        Some(Err(Error::WireMalformed(_)))
    ));
    assert!(Msg::decode(&long).is_err(), "refused by both");
}

#[test]
fn garbage_is_an_error_not_a_panic() {
    for len in 0..64u8 {
        let bytes: Vec<u8> = (0..len)
            .map(|i| i.wrapping_mul(37).wrapping_add(len))
            .collect();
        let decoded = Msg::decode(&bytes);
        // The zero-copy split accepts exactly the chunk messages the decoder accepts.
        match Msg::split_chunk(&bytes) {
            Some(Ok(_)) => assert!(matches!(decoded, Ok(Msg::Chunk { .. }))),
            Some(Err(_)) => assert!(decoded.is_err()),
            None => assert!(!matches!(decoded, Ok(Msg::Chunk { .. }))),
        }
    }
    // A huge claimed length must not allocate it.
    let mut evil = vec![1u8]; // Msg::Chunk
    evil.extend([0x01, 0x00, 0xff, 0xff, 0xff, 0xff, 0x0f]);
    assert!(Msg::decode(&evil).is_err());
    assert!(matches!(Msg::split_chunk(&evil), Some(Err(_))));
    let mut trailing = Msg::Ping.encode();
    trailing.push(0);
    assert!(Msg::decode(&trailing).is_err());
}
