//! The `[stream]` export (engine/export.rs): a record per accepted PUBLISH whose topic
//! matches and per lifecycle event, decoded here field by field with the test Avro
//! reader, and acknowledgements held for the stream's sink as for the store.

mod support;

use bytes::Bytes;
use ferromq_core::codec::{Ack, Packet, Property, ProtocolVersion, QoS};
use ferromq_core::engine::{EngineConfig, StreamConfig, StreamKey};
use ferromq_core::export::avro::reader::{decode, Decoded};
use ferromq_core::export::ExportBatch;
use support::*;

const V5: ProtocolVersion = ProtocolVersion::V5;
const V311: ProtocolVersion = ProtocolVersion::V3_1_1;
const BOOT: u64 = 1_700_000_000_000_000;
const WALL_MS: u64 = 1_763_000_000_000;

fn stream(filters: &[&str], events: bool, key: StreamKey, acked: bool) -> StreamConfig {
    StreamConfig {
        filters: filters.iter().map(|f| f.to_string()).collect(),
        events,
        node: "node-a".into(),
        key,
        acked,
        boot_id_us: BOOT,
    }
}

fn harness(config: EngineConfig, stream: StreamConfig) -> Harness {
    let mut h = Harness::new(config);
    h.engine.set_wall_clock(WALL_MS, h.now);
    h.engine.set_stream(Some(stream)).unwrap();
    h
}

fn take(h: &mut Harness) -> ExportBatch {
    h.engine.take_stream().expect("a batch")
}

fn messages(batch: &ExportBatch) -> Vec<Decoded> {
    batch.messages.iter().map(|r| decode(r.value)).collect()
}

fn events(batch: &ExportBatch) -> Vec<Decoded> {
    batch.events.iter().map(|r| decode(r.value)).collect()
}

fn topics(batch: &ExportBatch) -> Vec<String> {
    messages(batch)
        .into_iter()
        .filter_map(|d| d.topic)
        .collect()
}

#[test]
fn a_v5_publish_becomes_a_message_record_field_by_field() {
    let mut h = harness(
        EngineConfig::default(),
        stream(&["#"], false, StreamKey::Topic, false),
    );
    let mut c = connect("dev-1", V5, true);
    c.username = Some(s("alice"));
    let mut publisher = h.open(V5);
    h.engine.set_listener(publisher.conn, "plain");
    h.send(&publisher, Packet::Connect(Box::new(c)));
    assert!(matches!(h.recv(&mut publisher)[..], [Packet::ConnAck(_)]));
    let Packet::Publish(mut p) = publish("t/1", b"{\"v\":1}", QoS::AtLeastOnce, 3, true) else {
        unreachable!()
    };
    p.properties.0 = vec![
        Property::ContentType(s("application/json")),
        Property::PayloadFormatIndicator(1),
        Property::ResponseTopic(s("reply/1")),
        Property::CorrelationData(Bytes::from_static(b"\x01\x02")),
        Property::UserProperty(s("k"), s("v1")),
        Property::UserProperty(s("k"), s("v2")),
        Property::MessageExpiryInterval(60),
    ];
    h.send(&publisher, Packet::Publish(p));
    assert_eq!(h.stream_ready, 1);
    let batch = take(&mut h);
    assert_eq!(batch.number, 1);
    assert!(batch.events.is_empty(), "events are off");
    let record = batch.messages.iter().next().unwrap();
    assert_eq!(record.key, b"t/1");
    assert_eq!(record.timestamp_ms, WALL_MS as i64);
    let mut id = BOOT.to_be_bytes().to_vec();
    id.extend(0u64.to_be_bytes());
    assert_eq!(
        decode(record.value),
        Decoded {
            schema_version: 1,
            id,
            kind: 0,
            time_us: WALL_MS as i64 * 1000,
            node: "node-a".into(),
            listener: Some("plain".into()),
            client_id: Some("dev-1".into()),
            username: Some("alice".into()),
            topic: Some("t/1".into()),
            payload: Some(b"{\"v\":1}".to_vec()),
            qos: Some(1),
            retain: Some(true),
            content_type: Some("application/json".into()),
            payload_format: Some(1),
            response_topic: Some("reply/1".into()),
            correlation_data: Some(vec![1, 2]),
            user_properties: vec![("k".into(), "v1".into()), ("k".into(), "v2".into())],
            ..Decoded::default()
        }
    );
    assert!(h.engine.take_stream().is_none(), "nothing new");
}

#[test]
fn ids_count_up_from_zero_after_the_boot_id() {
    let mut h = harness(
        EngineConfig::default(),
        stream(&["#"], false, StreamKey::Topic, false),
    );
    let (publisher, _) = h.connect(connect("p", V311, true));
    for n in 0..3u8 {
        h.send(&publisher, publish("t", &[n], QoS::AtMostOnce, 0, false));
    }
    let ids: Vec<Vec<u8>> = messages(&take(&mut h)).into_iter().map(|d| d.id).collect();
    for (n, id) in ids.iter().enumerate() {
        assert_eq!(id[..8], BOOT.to_be_bytes());
        assert_eq!(id[8..], (n as u64).to_be_bytes());
    }
}

#[test]
fn only_topics_the_filters_match_are_streamed_and_sys_never() {
    let mut h = harness(
        EngineConfig::default(),
        stream(&["a/+", "b/#", "$SYS/#"], false, StreamKey::Topic, false),
    );
    let (publisher, _) = h.connect(connect("p", V311, true));
    for topic in ["a/x", "a/x/y", "b", "b/c/d", "c", "$SYS/broker/x"] {
        h.send(&publisher, publish(topic, b"m", QoS::AtMostOnce, 0, false));
    }
    h.engine
        .publish("b/from-broker", b"m", QoS::AtMostOnce, false, h.now);
    assert_eq!(topics(&take(&mut h)), vec!["a/x", "b", "b/c/d"]);
}

#[test]
fn the_default_filter_takes_every_topic_but_dollar_topics() {
    let mut h = harness(
        EngineConfig::default(),
        stream(&["#"], false, StreamKey::Topic, false),
    );
    let (publisher, _) = h.connect(connect("p", V311, true));
    for topic in ["a", "a/b/c", "$SYS/x", "$other", "/lead"] {
        h.send(&publisher, publish(topic, b"m", QoS::AtMostOnce, 0, false));
    }
    assert_eq!(topics(&take(&mut h)), vec!["a", "a/b/c", "/lead"]);
}

#[test]
fn keys_are_the_topic_the_client_or_one_level() {
    for (key, expected) in [
        (StreamKey::Client, vec![&b"dev"[..], b"dev"]),
        (StreamKey::Level(1), vec![&b"d7"[..], b"short"]),
    ] {
        let mut h = harness(EngineConfig::default(), stream(&["#"], false, key, false));
        let (publisher, _) = h.connect(connect("dev", V311, true));
        h.send(
            &publisher,
            publish("site/d7/temp", b"1", QoS::AtMostOnce, 0, false),
        );
        h.send(
            &publisher,
            publish("short", b"2", QoS::AtMostOnce, 0, false),
        );
        let batch = take(&mut h);
        let keys: Vec<&[u8]> = batch.messages.iter().map(|r| r.key).collect();
        assert_eq!(keys, expected, "{key:?}");
    }
    assert!("level:x".parse::<StreamKey>().is_err());
    assert_eq!("level:2".parse::<StreamKey>(), Ok(StreamKey::Level(2)));
}

#[test]
fn a_repeated_qos2_publish_is_streamed_once() {
    let mut h = harness(
        EngineConfig::default(),
        stream(&["#"], false, StreamKey::Topic, false),
    );
    let (publisher, _) = h.connect(connect("p", V311, true));
    h.send(
        &publisher,
        publish("t", b"once", QoS::ExactlyOnce, 9, false),
    );
    h.send(
        &publisher,
        publish("t", b"once", QoS::ExactlyOnce, 9, false),
    );
    assert_eq!(take(&mut h).messages.len(), 1);
}

#[test]
fn lifecycle_events_are_records_keyed_by_client() {
    let mut h = harness(
        EngineConfig::default(),
        stream(&["#"], true, StreamKey::Topic, false),
    );
    let c = with_will(
        with_expiry(connect("dev", V5, true), 1),
        "will/t",
        b"bye",
        None,
    );
    let (mut client, _) = h.connect(c);
    h.send(&client, subscribe(1, "a/#", QoS::AtLeastOnce));
    h.recv(&mut client);
    h.send(
        &client,
        Packet::Unsubscribe(ferromq_core::codec::Unsubscribe {
            packet_id: 2,
            properties: Default::default(),
            filters: vec![s("a/#")],
        }),
    );
    h.drop_connection(&client); // no DISCONNECT: the will goes out
    h.advance(2_000); // the session expires
    let batch = take(&mut h);
    assert!(batch.events.iter().all(|r| r.key == b"dev"));
    let events = events(&batch);
    let kinds: Vec<i64> = events.iter().map(|d| d.kind).collect();
    // connected, subscribed, unsubscribed, disconnected, will_published, session_expired
    assert_eq!(kinds, vec![1, 3, 4, 2, 6, 5]);
    let connected = &events[0];
    assert_eq!(connected.protocol_version, Some(5));
    assert_eq!(connected.keep_alive, Some(60));
    assert_eq!(connected.clean_start, Some(true));
    assert_eq!(connected.session_expiry, Some(1));
    assert_eq!(events[1].topic.as_deref(), Some("a/#"));
    assert_eq!(events[1].qos, Some(1));
    assert_eq!(events[2].topic.as_deref(), Some("a/#"));
    assert_eq!(events[3].reason.as_deref(), Some("socket_closed"));
    assert_eq!(events[3].reason_code, None);
    assert_eq!(events[4].topic.as_deref(), Some("will/t"));
    assert_eq!(events[4].payload.as_deref(), Some(&b"bye"[..]));
    assert_eq!(events[4].qos, Some(1));
    assert_eq!(events[5].client_id.as_deref(), Some("dev"));
    // A will is an event, not a message record: messages are clients' PUBLISHes.
    assert!(batch.messages.is_empty());
}

#[test]
fn a_dropped_delivery_is_a_record_with_its_reason() {
    let config = EngineConfig {
        queue_limit: 1,
        ..EngineConfig::default()
    };
    let mut h = harness(config, stream(&["nothing"], true, StreamKey::Topic, false));
    let (mut sub, _) = h.connect(with_expiry(connect("sub", V311, false), 60));
    h.send(&sub, subscribe(1, "t", QoS::AtLeastOnce));
    h.recv(&mut sub);
    h.send(&sub, disconnect());
    let (publisher, _) = h.connect(connect("p", V311, true));
    h.send(
        &publisher,
        publish("t", b"first", QoS::AtLeastOnce, 1, false),
    );
    h.send(
        &publisher,
        publish("t", b"second", QoS::AtLeastOnce, 2, false),
    );
    let dropped: Vec<Decoded> = events(&take(&mut h))
        .into_iter()
        .filter(|d| d.kind == 7)
        .collect();
    assert_eq!(dropped.len(), 1);
    assert_eq!(dropped[0].reason.as_deref(), Some("queue_full"));
    assert_eq!(dropped[0].client_id.as_deref(), Some("sub"));
    assert_eq!(dropped[0].payload.as_deref(), Some(&b"first"[..]));
}

#[test]
fn a_refused_connect_is_an_auth_refused_record_with_its_peer() {
    let config = EngineConfig {
        authenticate: true,
        ..EngineConfig::default()
    };
    let mut h = harness(config, stream(&["#"], true, StreamKey::Topic, false));
    let mut c = connect("intruder", V311, true);
    c.username = Some(s("mallory"));
    let client = h.open(V311);
    h.send(&client, Packet::Connect(Box::new(c)));
    let token = match &h.auth_events[0] {
        ferromq_core::engine::Event::Authenticate { token, .. } => *token,
        other => panic!("{other:?}"),
    };
    h.engine.set_peer(client.conn, token, "192.0.2.7:4242");
    h.engine.complete_auth(
        client.conn,
        token,
        ferromq_core::codec::ReasonCode::BadUserNameOrPassword,
        None,
        h.now,
    );
    let events = events(&take(&mut h));
    assert_eq!(events.len(), 1);
    let refused = &events[0];
    assert_eq!(refused.kind, 8);
    assert_eq!(refused.client_id.as_deref(), Some("intruder"));
    assert_eq!(refused.username.as_deref(), Some("mallory"));
    assert_eq!(refused.peer.as_deref(), Some("192.0.2.7:4242"));
    assert_eq!(refused.reason_code, Some(0x86));
}

#[test]
fn acks_wait_for_the_journal_and_the_stream_in_publish_order() {
    let mut h = harness(
        durable_config(),
        stream(&["#"], false, StreamKey::Topic, true),
    );
    let (mut sub, _) = h.connect(with_expiry(connect("sub", V311, false), 60));
    h.send(&sub, subscribe(1, "t", QoS::AtLeastOnce));
    h.recv(&mut sub);
    h.send(&sub, disconnect());
    while let Some((batch, _)) = h.engine.take_journal() {
        h.engine.journal_done(batch);
    }
    let (mut publisher, _) = h.connect(connect("p", V311, true));
    // 1: journaled (a persistent subscriber) and streamed.
    h.send(&publisher, publish("t", b"1", QoS::AtLeastOnce, 1, false));
    let (journal_1, _) = h.engine.take_journal().unwrap();
    let stream_1 = take(&mut h).number;
    // 2: streamed only, after 1.
    h.send(
        &publisher,
        publish("other", b"2", QoS::AtLeastOnce, 2, false),
    );
    let stream_2 = take(&mut h).number;
    assert!(h.recv(&mut publisher).is_empty(), "nothing stored yet");
    h.engine.journal_done(journal_1);
    assert!(
        h.recv(&mut publisher).is_empty(),
        "the stream has neither yet"
    );
    h.engine.stream_done(stream_1);
    assert_eq!(h.recv(&mut publisher), vec![Packet::PubAck(Ack::new(1))]);
    h.engine.stream_done(stream_2);
    assert_eq!(h.recv(&mut publisher), vec![Packet::PubAck(Ack::new(2))]);
}

#[test]
fn a_later_stream_batch_done_does_not_let_an_ack_overtake_an_earlier_one() {
    let mut h = harness(
        EngineConfig::default(),
        stream(&["#"], false, StreamKey::Topic, true),
    );
    let (mut publisher, _) = h.connect(connect("p", V311, true));
    h.send(&publisher, publish("a", b"1", QoS::AtLeastOnce, 1, false));
    let first = take(&mut h).number;
    h.send(&publisher, publish("b", b"2", QoS::ExactlyOnce, 2, false));
    let second = take(&mut h).number;
    assert!(h.recv(&mut publisher).is_empty());
    h.engine.stream_done(first);
    assert_eq!(h.recv(&mut publisher), vec![Packet::PubAck(Ack::new(1))]);
    h.engine.stream_done(second);
    assert_eq!(h.recv(&mut publisher), vec![Packet::PubRec(Ack::new(2))]);
}

#[test]
fn in_async_mode_and_with_the_stream_off_nothing_waits() {
    let mut h = harness(
        EngineConfig::default(),
        stream(&["#"], true, StreamKey::Topic, false),
    );
    let (mut publisher, _) = h.connect(connect("p", V311, true));
    h.send(&publisher, publish("a", b"1", QoS::AtLeastOnce, 1, false));
    assert_eq!(h.recv(&mut publisher), vec![Packet::PubAck(Ack::new(1))]);
    h.engine.set_stream(None).unwrap();
    h.send(&publisher, publish("a", b"2", QoS::AtLeastOnce, 2, false));
    assert_eq!(h.recv(&mut publisher), vec![Packet::PubAck(Ack::new(2))]);
    assert!(h.engine.take_stream().is_none());
}

#[test]
fn a_filter_that_is_not_a_topic_filter_is_refused_naming_it() {
    let mut h = Harness::new(EngineConfig::default());
    for bad in ["a/#/b", "$share/g/t"] {
        let err = h
            .engine
            .set_stream(Some(stream(&[bad], false, StreamKey::Topic, false)))
            .unwrap_err();
        assert!(err.to_string().contains(bad), "{err}");
    }
}

#[test]
fn batches_an_acked_sink_holds_count_in_the_memory_budget() {
    let mut h = harness(
        EngineConfig {
            memory_budget: 20_000,
            ..EngineConfig::default()
        },
        stream(&["#"], false, StreamKey::Topic, true),
    );
    let (publisher, _) = h.connect(connect("p", V311, true));
    // QoS 0 has no acknowledgement to hold: while the sink keeps the batches (Kafka
    // away with after_kafka), only the budget stops the publisher.
    let (mut sent, mut last) = (0, 0);
    while h.is_read(&publisher) {
        sent += 1;
        h.send(
            &publisher,
            publish("t", &[0; 200], QoS::AtMostOnce, 0, false),
        );
        if let Some(batch) = h.engine.take_stream() {
            last = batch.number;
        }
        assert!(sent < 1000, "the publisher was never held");
    }
    let used = h.engine.stats().memory_used;
    assert!(used > 20_000 && used < 21_000, "{used}");
    h.engine.stream_done(last);
    h.pump();
    assert_eq!(h.engine.stats().memory_used, 0);
    assert!(h.is_read(&publisher), "resumed once the sink confirmed");
    assert_eq!(
        messages(&take(&mut h)).len(),
        1,
        "the held PUBLISH, streamed"
    );
}
