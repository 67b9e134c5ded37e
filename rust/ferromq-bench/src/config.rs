//! What a run is asked to do: the scenario and its knobs, as one serde struct.
//!
//! The Python CLI and the harness build this as JSON; every field has a default so a
//! config names only what it changes. [`Config::validate`] rejects combinations the
//! generator cannot honour before any socket is opened.

use std::net::{IpAddr, Ipv4Addr};

use ferromq_core::codec::{ProtocolVersion, QoS};
use serde::{Deserialize, Serialize};

use crate::payload::STAMP_LEN;
use crate::BenchError;

/// The scenarios of the Open MQTT Benchmark, plus TBMQ's point-to-point one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Scenario {
    /// `pairs` publisher/subscriber pairs, each pair on its own topic.
    P2p,
    /// `publishers` on distinct topics, `subscribers` each on one wildcard over them.
    Fanin,
    /// `publishers` on one topic, `subscribers` all subscribed to it.
    Fanout,
    /// `publishers` on distinct topics, `subscribers` in one `$share` group.
    Sharedsub,
    /// A connection storm: `clients` connect at `connect_rate` and are held open.
    Conn,
}

/// How the clients reach the broker ([`crate::link`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Transport {
    Tcp,
    /// TLS over TCP, checked against `tls_ca_file` for `tls_server_name`.
    Tls,
    /// WebSocket (subprotocol `mqtt`) on `ws_path`.
    Ws,
    /// WebSocket over TLS.
    Wss,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Config {
    pub scenario: Scenario,
    pub host: String,
    pub port: u16,
    pub transport: Transport,
    /// PEM file of the CA that signed the broker's certificate (tls, wss).
    pub tls_ca_file: String,
    /// The name the broker's certificate must carry (tls, wss).
    pub tls_server_name: String,
    /// "1.2" or "1.3": the one TLS version offered.
    pub tls_version: String,
    /// Path of the WebSocket upgrade request (ws, wss).
    pub ws_path: String,
    /// 4 (MQTT 3.1.1) or 5 (MQTT 5.0).
    pub protocol: u8,
    /// QoS of the PUBLISH packets the publishers send.
    pub pub_qos: u8,
    /// QoS the subscribers ask for in SUBSCRIBE.
    pub sub_qos: u8,
    /// P2P pairs.
    pub pairs: u32,
    pub publishers: u32,
    pub subscribers: u32,
    /// Connections of the `conn` scenario.
    pub clients: u32,
    /// Payload bytes per message; at least the 24-byte stamp.
    pub payload: usize,
    /// Messages per second per publisher; 0 sends as fast as the window allows.
    pub rate: f64,
    /// Unacknowledged QoS 1/2 publishes per publisher.
    pub inflight: u32,
    /// Measured messages per publisher; 0 runs for `duration` instead.
    pub count: u64,
    /// Seconds of measured publishing (when `count` is 0), or of holding (`conn`).
    pub duration: f64,
    /// Seconds of publishing before measurement starts.
    pub warmup: f64,
    /// Seconds to wait after publishing for outstanding deliveries and acks.
    pub drain_timeout: f64,
    /// Seconds allowed for every client to connect and subscribe.
    pub connect_timeout: f64,
    /// New connections per second over the whole run; 0 connects without pacing.
    pub connect_rate: f64,
    /// Subscribers keep their session (clean session 0 / v5 session expiry).
    pub persistent: bool,
    /// Session Expiry Interval sent by persistent MQTT 5.0 subscribers, seconds.
    pub session_expiry: u32,
    /// Each subscriber drops its connection once, after this many deliveries, without
    /// acknowledging the last batch, and reconnects; 0 never does.
    pub subscriber_reconnect_after: u64,
    /// Source addresses 127.0.0.1 .. 127.0.0.N, for more than ~28k connections.
    pub source_addresses: u8,
    /// Event-loop threads; 0 uses every core this process may run on.
    pub threads: u32,
    pub keep_alive: u16,
    pub topic_prefix: String,
    pub client_id_prefix: String,
    /// Print a progress line to stderr once per second.
    pub progress: bool,
}

impl Default for Config {
    fn default() -> Config {
        Config {
            scenario: Scenario::P2p,
            host: "127.0.0.1".into(),
            port: 1883,
            transport: Transport::Tcp,
            tls_ca_file: String::new(),
            tls_server_name: "localhost".into(),
            tls_version: "1.3".into(),
            ws_path: "/mqtt".into(),
            protocol: 4,
            pub_qos: 0,
            sub_qos: 0,
            pairs: 10,
            publishers: 1,
            subscribers: 1,
            clients: 100,
            payload: 64,
            rate: 0.0,
            inflight: 16,
            count: 0,
            duration: 10.0,
            warmup: 1.0,
            drain_timeout: 5.0,
            connect_timeout: 30.0,
            connect_rate: 0.0,
            persistent: false,
            session_expiry: 3600,
            subscriber_reconnect_after: 0,
            source_addresses: 1,
            threads: 0,
            keep_alive: 60,
            topic_prefix: "ferromq-bench".into(),
            client_id_prefix: "fmqb".into(),
            progress: false,
        }
    }
}

impl Config {
    pub fn from_json(json: &str) -> Result<Config, BenchError> {
        let config: Config = serde_json::from_str(json)
            .map_err(|err| BenchError::Config(format!("invalid config: {err}")))?;
        config.validate()?;
        Ok(config)
    }

    pub fn validate(&self) -> Result<(), BenchError> {
        let fail = |message: &str| Err(BenchError::Config(message.to_string()));
        let dest = self.destination_ip()?;
        if !dest.is_loopback() {
            return fail("host must be a loopback address: the generator only loads 127.0.0.0/8");
        }
        if self.version().is_none() {
            return fail("protocol must be 4 (MQTT 3.1.1) or 5 (MQTT 5.0)");
        }
        if self.pub_qos > 2 || self.sub_qos > 2 {
            return fail("qos must be 0, 1 or 2");
        }
        if self.payload < STAMP_LEN {
            return Err(BenchError::Config(format!(
                "payload must be at least {STAMP_LEN} bytes: every message carries its stamp"
            )));
        }
        if self.inflight == 0 || self.inflight > 65_535 {
            return fail("inflight must be between 1 and 65535");
        }
        let counts = match self.scenario {
            Scenario::P2p => [self.pairs, 1],
            Scenario::Conn => [self.clients, 1],
            _ => [self.publishers, self.subscribers],
        };
        if counts.contains(&0) {
            return fail("the scenario needs at least one client of each role");
        }
        let non_negative = [
            self.rate,
            self.duration,
            self.warmup,
            self.drain_timeout,
            self.connect_timeout,
            self.connect_rate,
        ];
        if non_negative.iter().any(|v| !v.is_finite() || *v < 0.0) {
            return fail("rates and durations must be finite and not negative");
        }
        if self.count == 0 && self.duration == 0.0 {
            return fail("give a message count or a duration");
        }
        if !matches!(self.tls_version.as_str(), "1.2" | "1.3") {
            return fail("tls_version must be \"1.2\" or \"1.3\"");
        }
        if matches!(self.transport, Transport::Tls | Transport::Wss) && self.tls_ca_file.is_empty()
        {
            return fail("tls_ca_file is required for the tls and wss transports");
        }
        if self.source_addresses == 0 || self.source_addresses == 255 {
            return fail("source_addresses must be between 1 and 254");
        }
        Ok(())
    }

    pub fn version(&self) -> Option<ProtocolVersion> {
        match self.protocol {
            4 => Some(ProtocolVersion::V3_1_1),
            5 => Some(ProtocolVersion::V5),
            _ => None,
        }
    }

    pub fn publish_qos(&self) -> QoS {
        QoS::from_u8(self.pub_qos).unwrap_or_default()
    }

    pub fn subscribe_qos(&self) -> QoS {
        QoS::from_u8(self.sub_qos).unwrap_or_default()
    }

    pub fn destination_ip(&self) -> Result<IpAddr, BenchError> {
        let host = if self.host == "localhost" {
            "127.0.0.1"
        } else {
            &self.host
        };
        host.parse()
            .map_err(|_| BenchError::Config(format!("host {:?} is not an IP address", self.host)))
    }

    /// The local address of client `index`: 127.0.0.1 .. 127.0.0.N in turn.
    pub fn source_ip(&self, index: usize) -> Option<IpAddr> {
        (self.source_addresses > 1).then(|| {
            let last = 1 + (index % usize::from(self.source_addresses)) as u8;
            IpAddr::V4(Ipv4Addr::new(127, 0, 0, last))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_validate_and_json_names_only_changes() {
        let config = Config::from_json(r#"{"scenario": "fanin", "publishers": 3}"#).unwrap();
        assert_eq!(config.scenario, Scenario::Fanin);
        assert_eq!(config.publishers, 3);
        assert_eq!(config.port, 1883);
    }

    #[test]
    fn rejects_what_cannot_run() {
        for json in [
            r#"{"host": "10.0.0.1"}"#,
            r#"{"protocol": 3}"#,
            r#"{"pub_qos": 3}"#,
            r#"{"payload": 8}"#,
            r#"{"inflight": 0}"#,
            r#"{"pairs": 0}"#,
            r#"{"count": 0, "duration": 0}"#,
            r#"{"rate": -1}"#,
            r#"{"bogus": 1}"#,
            r#"{"transport": "quic"}"#,
            r#"{"tls_version": "1.1"}"#,
            r#"{"transport": "tls"}"#,
        ] {
            assert!(
                Config::from_json(json).is_err(),
                "{json} should be rejected"
            );
        }
    }

    #[test]
    fn source_addresses_rotate_over_loopback() {
        let config = Config {
            source_addresses: 3,
            ..Config::default()
        };
        let ips: Vec<_> = (0..4).map(|i| config.source_ip(i).unwrap()).collect();
        assert_eq!(ips[0], IpAddr::V4(Ipv4Addr::new(127, 0, 0, 1)));
        assert_eq!(ips[2], IpAddr::V4(Ipv4Addr::new(127, 0, 0, 3)));
        assert_eq!(ips[3], ips[0]);
        assert_eq!(Config::default().source_ip(5), None);
    }
}
