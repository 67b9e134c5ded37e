//! QoS 2 exactly once across a crash, in both directions: the engine is driven
//! through a QoS 2 flow by clients that follow the protocol, and the broker is
//! "killed" at every point between its inputs and its store's confirmations, then
//! restarted on what the store held. A persistent subscriber must receive the
//! message exactly once, however the crash fell [MQTT-4.3.3].

mod support;

use std::collections::HashSet;

use bytes::{Bytes, BytesMut};
use ferromq_core::codec::{Ack, Packet, ProtocolVersion, Publish, QoS};
use support::*;

const V311: ProtocolVersion = ProtocolVersion::V3_1_1;

/// A harness whose store confirms every batch at once.
fn stored_harness() -> Harness {
    let mut h = Harness::new(durable_config());
    h.store = Some(BytesMut::new());
    h
}

/// A client that follows the protocol and remembers across reconnects what a
/// persistent session must: a receiver keeps the ids it PUBRECed until PUBREL
/// (so a DUP of one is not delivered again), a publisher its unfinished flow.
struct Peer {
    id: &'static str,
    persistent: bool,
    filter: Option<&'static str>,
    client: Option<Client>,
    unreleased: HashSet<u16>,
    delivered: Vec<Vec<u8>>,
    /// An outbound QoS 2 flow: packet id, payload, PUBREC seen.
    sending: Option<(u16, Vec<u8>, bool)>,
    /// Published on the same packet id the moment the flow's PUBCOMP arrives, as a
    /// client that reuses an id at once does.
    then: Option<(u16, Vec<u8>)>,
}

impl Peer {
    fn new(id: &'static str, persistent: bool, filter: Option<&'static str>) -> Peer {
        Peer {
            id,
            persistent,
            filter,
            client: None,
            unreleased: HashSet::new(),
            delivered: Vec::new(),
            sending: None,
            then: None,
        }
    }
}

/// The engine, a store that holds only what was confirmed, and the clients.
struct World {
    h: Harness,
    stored: BytesMut,
    taken: Vec<(u64, Bytes)>,
    peers: Vec<Peer>,
}

impl World {
    fn new(peers: Vec<Peer>) -> World {
        let mut world = World {
            h: Harness::new(durable_config()),
            stored: BytesMut::new(),
            taken: Vec::new(),
            peers,
        };
        world.connect_all();
        // The SUBACKs leave once the store has the subscriptions.
        world.take();
        world.store();
        world.round();
        world
    }

    /// Connect every client (a persistent one resumes and resends its unfinished
    /// flow [MQTT-4.4.0-1]); subscribe where the session does not keep it.
    fn connect_all(&mut self) {
        for peer in &mut self.peers {
            let (client, _) = self.h.connect(connect(peer.id, V311, !peer.persistent));
            if !peer.persistent {
                peer.unreleased.clear();
            }
            if let Some(filter) = peer.filter {
                self.h.send(&client, subscribe(1, filter, QoS::ExactlyOnce));
            }
            match &peer.sending {
                Some((id, payload, false)) => {
                    let mut packet = publish("t", payload, QoS::ExactlyOnce, *id, false);
                    if let Packet::Publish(p) = &mut packet {
                        p.dup = true;
                    }
                    self.h.send(&client, packet);
                }
                Some((id, _, true)) => self.h.send(&client, Packet::PubRel(Ack::new(*id))),
                None => {}
            }
            peer.client = Some(client);
        }
    }

    fn publish(&mut self, who: usize, id: u16, payload: &[u8]) {
        let peer = &mut self.peers[who];
        peer.sending = Some((id, payload.to_vec(), false));
        let client = peer.client.as_ref().unwrap();
        self.h
            .send(client, publish("t", payload, QoS::ExactlyOnce, id, false));
    }

    /// Every client reads what it got and answers it; true when any packet came.
    fn round(&mut self) -> bool {
        self.read(true)
    }

    /// Every client reads what reached it; it answers when `answer` (a broker
    /// that was killed reads no answer).
    fn read(&mut self, answer: bool) -> bool {
        let mut progress = false;
        for peer in &mut self.peers {
            let client = peer.client.as_mut().unwrap();
            let got = self.h.recv(client);
            progress |= !got.is_empty();
            for packet in got {
                let reply = match packet {
                    Packet::Publish(Publish {
                        packet_id, payload, ..
                    }) => {
                        if peer.unreleased.insert(packet_id) {
                            peer.delivered.push(payload.to_vec());
                        }
                        Some(Packet::PubRec(Ack::new(packet_id)))
                    }
                    Packet::PubRel(ack) => {
                        peer.unreleased.remove(&ack.packet_id);
                        Some(Packet::PubComp(Ack::new(ack.packet_id)))
                    }
                    Packet::PubRec(ack) => {
                        if let Some(flow) = peer.sending.as_mut() {
                            flow.2 = true;
                        }
                        Some(Packet::PubRel(Ack::new(ack.packet_id)))
                    }
                    Packet::PubComp(_) => {
                        // The next flow starts now; to a broker that died, it goes
                        // once the client is connected again (`connect_all`).
                        peer.sending = None;
                        peer.then.take().map(|(id, payload)| {
                            let packet = publish("t", &payload, QoS::ExactlyOnce, id, false);
                            peer.sending = Some((id, payload, false));
                            packet
                        })
                    }
                    _ => None,
                };
                if let Some(reply) = reply.filter(|_| answer) {
                    let client = peer.client.as_ref().unwrap();
                    self.h.send(client, reply);
                }
            }
        }
        progress
    }

    /// The store took the journal's batches but has not written them yet.
    fn take(&mut self) {
        while let Some(batch) = self.h.engine.take_journal() {
            self.taken.push(batch);
        }
    }

    /// The store wrote what it took and confirms it.
    fn store(&mut self) {
        for (n, bytes) in std::mem::take(&mut self.taken) {
            self.stored.extend_from_slice(&bytes);
            self.h.engine.journal_done(n);
        }
    }

    /// kill -9: what the broker wrote to its sockets still reaches the clients,
    /// what its store took but did not write is lost; a new broker restores the
    /// store and every client reconnects.
    fn crash(&mut self) {
        self.read(false);
        self.taken.clear();
        let mut h = Harness::new(durable_config());
        h.now = self.h.now + 1_000;
        let report = h.engine.restore(self.stored.clone().freeze(), h.now);
        assert_eq!(report.error, None);
        self.h = h;
        self.connect_all();
    }

    /// Run until nothing moves, crashing once after step `crash_at`; returns the
    /// number of steps a run without a crash takes.
    fn settle(&mut self, crash_at: Option<usize>) -> usize {
        let mut step = 0;
        let mut idle = 0;
        while idle < 2 {
            let progress = self.round();
            self.take();
            step += 1;
            if crash_at == Some(step) {
                self.crash();
            }
            let stored = !self.taken.is_empty();
            self.store();
            step += 1;
            if crash_at == Some(step) {
                self.crash();
            }
            idle = if progress || stored { 0 } else { idle + 1 };
        }
        step
    }
}

/// A persistent QoS 2 publisher, a persistent and a clean QoS 2 subscriber.
fn publisher_and_subscribers() -> World {
    World::new(vec![
        Peer::new("pub", true, None),
        Peer::new("sub", true, Some("t")),
        Peer::new("clean", false, Some("t")),
    ])
}

#[test]
fn an_inbound_qos2_message_is_delivered_exactly_once_whatever_the_crash_point() {
    let steps = {
        let mut world = publisher_and_subscribers();
        world.publish(0, 7, b"m");
        world.settle(None)
    };
    for crash_at in 1..=steps {
        let mut world = publisher_and_subscribers();
        world.publish(0, 7, b"m");
        world.settle(Some(crash_at));
        assert_eq!(
            world.peers[1].delivered,
            vec![b"m".to_vec()],
            "persistent subscriber, crash after step {crash_at}"
        );
        // A clean session is gone with the crash: at most once, never twice.
        assert!(
            world.peers[2].delivered.len() <= 1,
            "clean subscriber got {:?}, crash after step {crash_at}",
            world.peers[2].delivered
        );
        assert!(
            world.peers[0].sending.is_none(),
            "the publisher's flow ended"
        );
        assert!(world.peers[1].unreleased.is_empty(), "every PUBREL arrived");
    }
}

#[test]
fn a_packet_id_reused_at_once_after_pubcomp_is_a_new_message_whatever_the_crash_point() {
    // The publisher sends "m2" on packet id 7 as soon as the PUBCOMP of "m1" (also
    // 7) arrives. Had the PUBCOMP left before the store had the id's release, a
    // crash would restore 7 as unreleased and take the DUP of "m2" for a
    // retransmission of "m1": PUBRECed, never delivered [MQTT-4.3.3-9].
    let world = || {
        let mut world = publisher_and_subscribers();
        world.peers[0].then = Some((7, b"m2".to_vec()));
        world.publish(0, 7, b"m1");
        world
    };
    let steps = world().settle(None);
    for crash_at in 1..=steps {
        let mut world = world();
        world.settle(Some(crash_at));
        assert_eq!(
            world.peers[1].delivered,
            vec![b"m1".to_vec(), b"m2".to_vec()],
            "persistent subscriber, crash after step {crash_at}"
        );
        assert!(world.peers[0].sending.is_none() && world.peers[0].then.is_none());
    }
}

#[test]
fn an_outbound_qos2_delivery_is_never_resent_after_its_pubrel_whatever_the_crash_point() {
    let world = || World::new(vec![Peer::new("sub", true, Some("t"))]);
    let steps = {
        let mut w = world();
        let now = w.h.now;
        w.h.engine.publish("t", b"m", QoS::ExactlyOnce, false, now);
        w.settle(None)
    };
    for crash_at in 1..=steps {
        let mut w = world();
        let now = w.h.now;
        w.h.engine.publish("t", b"m", QoS::ExactlyOnce, false, now);
        w.take();
        w.store();
        w.settle(Some(crash_at));
        assert_eq!(
            w.peers[0].delivered,
            vec![b"m".to_vec()],
            "crash after step {crash_at}"
        );
        assert!(w.peers[0].unreleased.is_empty(), "PUBREL resumed");
    }
}

/// A persistent QoS 2 subscriber that received a stored delivery and sent PUBREC
/// for it; the packet id.
fn pubreced_delivery() -> (World, u16) {
    let mut w = World::new(vec![Peer::new("sub", true, Some("t"))]);
    let now = w.h.now;
    w.h.engine.publish("t", b"m", QoS::ExactlyOnce, false, now);
    w.take();
    w.store();
    let client = w.peers[0].client.as_mut().unwrap();
    let got = w.h.recv(client);
    let [Packet::Publish(p)] = got.as_slice() else {
        panic!("expected the PUBLISH, got {got:?}");
    };
    let id = p.packet_id;
    w.h.send(client, Packet::PubRec(Ack::new(id)));
    (w, id)
}

#[test]
fn pubrel_leaves_only_once_the_store_has_the_release() {
    let (mut w, id) = pubreced_delivery();
    let client = w.peers[0].client.as_mut().unwrap();
    assert_eq!(
        w.h.recv(client),
        vec![],
        "no PUBREL before the store has it"
    );
    w.take();
    w.store();
    let client = w.peers[0].client.as_mut().unwrap();
    assert_eq!(w.h.recv(client), vec![Packet::PubRel(Ack::new(id))]);
}

#[test]
fn an_inbound_qos2_message_reaches_online_subscribers_only_once_stored() {
    let mut w = publisher_and_subscribers();
    w.publish(0, 7, b"m");
    for peer in 0..3 {
        let client = w.peers[peer].client.as_mut().unwrap();
        assert_eq!(w.h.recv(client), vec![], "{} before the store", peer);
    }
    w.take();
    w.store();
    let client = w.peers[0].client.as_mut().unwrap();
    assert_eq!(w.h.recv(client), vec![Packet::PubRec(Ack::new(7))]);
    for peer in 1..3 {
        let client = w.peers[peer].client.as_mut().unwrap();
        assert_eq!(payloads(&w.h.recv(client)), vec![b"m".to_vec()]);
    }
}

#[test]
fn a_snapshot_keeps_pubrel_flows_apart_from_queued_deliveries() {
    // Two deliveries: sequence 0 (packet id 1) goes past PUBREC, sequence 1
    // (packet id 2) stays queued. The snapshot writes packet id 1 as a bare
    // Release, which must not take the place of sequence 1.
    let mut w = World::new(vec![Peer::new("sub", true, Some("t"))]);
    let now = w.h.now;
    w.h.engine.publish("t", b"1", QoS::ExactlyOnce, false, now);
    w.h.engine.publish("t", b"2", QoS::ExactlyOnce, false, now);
    let client = w.peers[0].client.as_mut().unwrap();
    let got = w.h.recv(client);
    assert_eq!(payloads(&got), vec![b"1".to_vec(), b"2".to_vec()]);
    w.h.send(client, Packet::PubRec(Ack::new(1)));
    w.take();
    w.store();
    let client = w.peers[0].client.as_mut().unwrap();
    assert_eq!(w.h.recv(client), vec![Packet::PubRel(Ack::new(1))]);

    let mut h = stored_harness();
    let report = h.engine.restore(w.h.engine.snapshot(), h.now);
    assert_eq!(report.error, None);
    let (mut sub, _) = h.connect(connect("sub", V311, false));
    let got = h.recv(&mut sub);
    assert_eq!(got.len(), 2, "PUBREL 1 and PUBLISH 2, got {got:?}");
    assert!(got.contains(&Packet::PubRel(Ack::new(1))));
    assert!(
        matches!(publishes(&got).as_slice(), [p] if p.packet_id == 2 && p.dup && &p.payload[..] == b"2")
    );
    // PUBCOMP for 1 must not take the queued delivery 2 with it.
    h.send(&sub, Packet::PubComp(Ack::new(1)));
    let again = h.engine.snapshot();
    let mut h2 = stored_harness();
    h2.engine.restore(again, h2.now);
    let (mut sub, _) = h2.connect(connect("sub", V311, false));
    assert_eq!(payloads(&h2.recv(&mut sub)), vec![b"2".to_vec()]);
}

#[test]
fn a_pubrel_resent_on_reconnect_still_waits_for_its_release() {
    let (mut w, id) = pubreced_delivery();
    let client = w.peers[0].client.take().unwrap();
    w.h.drop_connection(&client);
    let (mut client, _) = w.h.connect(connect("sub", V311, false));
    assert_eq!(
        w.h.recv(&mut client),
        vec![],
        "the Release is not stored yet"
    );
    w.take();
    w.store();
    assert_eq!(w.h.recv(&mut client), vec![Packet::PubRel(Ack::new(id))]);
}
