//! Application groups (engine/application_groups.rs): an APPLICATION client's shared group
//! is fed through the application store's consumer group, not by the engine.

mod support;

use bytes::{Bytes, BytesMut};
use ferromq_core::codec::{Ack, Packet, ProtocolVersion, QoS};
use ferromq_core::engine::{ApplicationOp, EngineConfig, JournalSplit};
use ferromq_core::topic::ShareStrategy;
use support::*;

const V5: ProtocolVersion = ProtocolVersion::V5;
const GROUP: &str = "$share/workers/jobs/#";

fn streaming_harness() -> Harness {
    streaming_harness_with(ShareStrategy::RoundRobin)
}

fn streaming_harness_with(strategy: ShareStrategy) -> Harness {
    let mut h = Harness::with_strategy(
        EngineConfig {
            journal: true,
            application_client_prefixes: vec!["app-".into()],
            serve_application_groups: true,
            ..EngineConfig::default()
        },
        strategy,
    );
    h.store = Some(BytesMut::new());
    h
}

/// What the journal split sends to the application store for `client`: the value
/// of each stored delivery.
fn application_enqueues(h: &Harness, client: &str) -> Vec<Bytes> {
    stream_records(h, client)
        .into_iter()
        .map(|(_, value)| value)
        .collect()
}

/// (packet id: the partition key for a stream, value) per stored delivery.
fn stream_records(h: &Harness, client: &str) -> Vec<(u16, Bytes)> {
    let stored = h.store.clone().unwrap().freeze();
    let split = JournalSplit::new().split(&stored).unwrap();
    split
        .application
        .into_iter()
        .filter_map(|op| match op {
            ApplicationOp::Enqueue {
                client: c,
                packet_id,
                value,
            } if c == client => Some((packet_id, value)),
            _ => None,
        })
        .collect()
}

fn member(h: &mut Harness, id: &str, qos: QoS) -> Client {
    let (mut c, _) = h.connect(with_expiry(connect(id, V5, false), 600));
    h.send(&c, subscribe(1, GROUP, qos));
    h.recv(&mut c);
    c
}

#[test]
fn an_application_group_s_messages_go_to_its_stream_once_not_to_a_member() {
    let mut h = streaming_harness();
    let mut a = member(&mut h, "app-a", QoS::AtLeastOnce);
    let mut b = member(&mut h, "app-b", QoS::AtLeastOnce);
    assert_eq!(
        h.stream_members,
        vec![
            ("app-a".into(), GROUP.into(), true),
            ("app-b".into(), GROUP.into(), true)
        ]
    );
    let (mut publisher, _) = h.connect(connect("pub", V5, true));
    for id in 1..=3 {
        h.send(
            &publisher,
            publish("jobs/1", b"job", QoS::AtLeastOnce, id, false),
        );
    }
    // PUBACKs were held for the stored batch, which the harness confirmed.
    assert_eq!(publishes(&h.recv(&mut a)).len(), 0);
    assert_eq!(publishes(&h.recv(&mut b)).len(), 0);
    assert_eq!(h.recv(&mut publisher).len(), 3);
    assert_eq!(
        application_enqueues(&h, &format!("\0{GROUP}")).len(),
        3,
        "one record per message in the group's stream"
    );
    assert!(application_enqueues(&h, "app-a").is_empty());
}

#[test]
fn a_streamed_record_reaches_its_member_and_its_token_is_done_on_puback() {
    let mut h = streaming_harness();
    let mut a = member(&mut h, "app-a", QoS::AtLeastOnce);
    let (publisher, _) = h.connect(connect("pub", V5, true));
    h.send(
        &publisher,
        publish("jobs/7", b"payload", QoS::AtLeastOnce, 1, false),
    );
    let records = application_enqueues(&h, &format!("\0{GROUP}"));
    let now = h.now;
    assert!(h
        .engine
        .deliver_application("app-a", GROUP, records[0].clone(), 41, now));
    let got = h.recv(&mut a);
    let delivered = publishes(&got);
    assert_eq!(delivered.len(), 1);
    assert_eq!(&delivered[0].payload[..], b"payload");
    assert_eq!(&*delivered[0].topic, "jobs/7");
    assert!(h.stream_done.is_empty(), "not done before PUBACK");
    let packet_id = delivered[0].packet_id;
    h.send(&a, puback(packet_id));
    assert_eq!(h.stream_done, vec![41]);
    // The member's own session never stored it: its topic holds it.
    assert!(application_enqueues(&h, "app-a").is_empty());
}

#[test]
fn a_qos2_streamed_delivery_is_done_at_pubrec_and_its_pubrel_state_is_kept() {
    let mut h = streaming_harness();
    let mut a = member(&mut h, "app-a", QoS::ExactlyOnce);
    let (publisher, _) = h.connect(connect("pub", V5, true));
    h.send(
        &publisher,
        publish("jobs/2", b"x", QoS::ExactlyOnce, 1, false),
    );
    let record = application_enqueues(&h, &format!("\0{GROUP}"))[0].clone();
    let now = h.now;
    h.engine.deliver_application("app-a", GROUP, record, 5, now);
    let got = h.recv(&mut a);
    let packet_id = publishes(&got)[0].packet_id;
    h.send(&a, Packet::PubRec(Ack::new(packet_id)));
    assert_eq!(h.stream_done, vec![5]);
    assert!(h
        .recv(&mut a)
        .contains(&Packet::PubRel(Ack::new(packet_id))));
}

#[test]
fn a_member_leaving_drops_its_unfinished_streamed_deliveries_unreported() {
    let mut h = streaming_harness();
    let mut a = member(&mut h, "app-a", QoS::AtLeastOnce);
    let (publisher, _) = h.connect(connect("pub", V5, true));
    h.send(
        &publisher,
        publish("jobs/3", b"y", QoS::AtLeastOnce, 1, false),
    );
    let record = application_enqueues(&h, &format!("\0{GROUP}"))[0].clone();
    let now = h.now;
    h.engine
        .deliver_application("app-a", GROUP, record.clone(), 9, now);
    assert_eq!(publishes(&h.recv(&mut a)).len(), 1);
    h.drop_connection(&a);
    assert_eq!(
        h.stream_members.last(),
        Some(&("app-a".into(), GROUP.into(), false))
    );
    assert!(h.stream_done.is_empty(), "left for the next member");
    // Offline: nothing is handed to it.
    let now = h.now;
    assert!(!h
        .engine
        .deliver_application("app-a", GROUP, record, 10, now));
    // Back with its session: online for the group again, and nothing resent.
    let (mut again, _) = h.connect(with_expiry(connect("app-a", V5, false), 600));
    assert_eq!(
        h.stream_members.last(),
        Some(&("app-a".into(), GROUP.into(), true))
    );
    assert!(publishes(&h.recv(&mut again)).is_empty());
}

#[test]
fn a_group_an_application_client_joins_is_streamed_for_every_member() {
    let mut h = streaming_harness();
    let _device = member(&mut h, "dev-1", QoS::AtLeastOnce);
    assert!(
        h.stream_members.is_empty(),
        "a device group is the engine's"
    );
    let _app = member(&mut h, "app-a", QoS::AtLeastOnce);
    assert_eq!(
        h.stream_members,
        vec![
            ("dev-1".into(), GROUP.into(), true),
            ("app-a".into(), GROUP.into(), true)
        ]
    );
}

#[test]
fn device_groups_and_qos0_messages_stay_with_the_engine() {
    let mut h = streaming_harness();
    let mut app = member(&mut h, "app-a", QoS::AtLeastOnce);
    let (mut device, _) = h.connect(connect("dev-2", V5, true));
    h.send(
        &device,
        subscribe(1, "$share/devices/jobs/#", QoS::AtLeastOnce),
    );
    h.recv(&mut device);
    let (publisher, _) = h.connect(connect("pub", V5, true));
    h.send(
        &publisher,
        publish("jobs/1", b"q1", QoS::AtLeastOnce, 1, false),
    );
    h.send(
        &publisher,
        publish("jobs/1", b"q0", QoS::AtMostOnce, 0, false),
    );
    let to_device = h.recv(&mut device);
    assert_eq!(payloads(&to_device), vec![b"q1".to_vec(), b"q0".to_vec()]);
    // The application group: QoS 0 straight from the engine, QoS 1 through its stream.
    assert_eq!(payloads(&h.recv(&mut app)), vec![b"q0".to_vec()]);
    assert_eq!(application_enqueues(&h, &format!("\0{GROUP}")).len(), 1);
}

#[test]
fn a_stream_s_partition_key_follows_the_topic_under_hash_topic_else_the_sequence() {
    let keys = |strategy| {
        let mut h = streaming_harness_with(strategy);
        let _member = member(&mut h, "app-a", QoS::AtLeastOnce);
        let (publisher, _) = h.connect(connect("pub", V5, true));
        for (id, topic) in [(1, "jobs/a"), (2, "jobs/b"), (3, "jobs/a"), (4, "jobs/a")] {
            h.send(
                &publisher,
                publish(topic, b"m", QoS::AtLeastOnce, id, false),
            );
        }
        stream_records(&h, &format!("\0{GROUP}"))
            .into_iter()
            .map(|(key, _)| key)
            .collect::<Vec<u16>>()
    };
    let by_topic = keys(ShareStrategy::HashTopic);
    assert_eq!(by_topic[0], by_topic[2]);
    assert_eq!(by_topic[0], by_topic[3]);
    assert_ne!(by_topic[0], by_topic[1]);
    assert_eq!(keys(ShareStrategy::RoundRobin), vec![1, 2, 3, 4]);
}
