//! Turns a [`Config`] into the clients of a run: who publishes where, who subscribes
//! to what, and how many deliveries each message should make.
//!
//! Client ids are fixed (`<prefix>-p<i>`, `-s<i>`, `-c<i>`) so a persistent subscriber
//! finds its session again in the next run. Topics, under `topic_prefix`:
//!
//! | scenario  | publisher i publishes to | every subscriber subscribes to |
//! |-----------|--------------------------|--------------------------------|
//! | p2p       | `<t>/p2p/<i>`            | subscriber i: `<t>/p2p/<i>`    |
//! | fanin     | `<t>/fanin/<i>`          | `<t>/fanin/+`                  |
//! | fanout    | `<t>/fanout`             | `<t>/fanout`                   |
//! | sharedsub | `<t>/shared/<i>`         | `$share/bench/<t>/shared/+`    |

use std::net::IpAddr;

use crate::config::{Config, Scenario};
use crate::stats::Audience;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Role {
    Publisher {
        id: u32,
        topic: String,
    },
    Subscriber {
        index: u32,
        filter: String,
    },
    /// Connects and holds the connection (`conn`).
    Idle,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClientSpec {
    pub client_id: String,
    pub role: Role,
    pub source: Option<IpAddr>,
}

#[derive(Debug, Clone)]
pub struct Plan {
    pub clients: Vec<ClientSpec>,
    pub publishers: u32,
    pub subscribers: u32,
    pub audience: Audience,
    /// Deliveries one published message should make.
    pub fan_out: u64,
}

pub fn plan(config: &Config) -> Plan {
    let t = &config.topic_prefix;
    let (publishers, subscribers) = match config.scenario {
        Scenario::P2p => (config.pairs, config.pairs),
        Scenario::Conn => (0, 0),
        _ => (config.publishers, config.subscribers),
    };
    let publish_topic = |i: u32| match config.scenario {
        Scenario::P2p => format!("{t}/p2p/{i}"),
        Scenario::Fanin => format!("{t}/fanin/{i}"),
        Scenario::Fanout => format!("{t}/fanout"),
        Scenario::Sharedsub => format!("{t}/shared/{i}"),
        Scenario::Conn => unreachable!("conn has no publishers"),
    };
    let filter = |i: u32| match config.scenario {
        Scenario::P2p => format!("{t}/p2p/{i}"),
        Scenario::Fanin => format!("{t}/fanin/+"),
        Scenario::Fanout => format!("{t}/fanout"),
        Scenario::Sharedsub => format!("$share/bench/{t}/shared/+"),
        Scenario::Conn => unreachable!("conn has no subscribers"),
    };
    let prefix = &config.client_id_prefix;
    let roles = (0..subscribers)
        .map(|index| {
            let role = Role::Subscriber {
                index,
                filter: filter(index),
            };
            (format!("{prefix}-s{index}"), role)
        })
        .chain((0..publishers).map(|id| {
            let role = Role::Publisher {
                id,
                topic: publish_topic(id),
            };
            (format!("{prefix}-p{id}"), role)
        }));
    let idle = (0..if config.scenario == Scenario::Conn {
        config.clients
    } else {
        0
    })
        .map(|i| (format!("{prefix}-c{i}"), Role::Idle));
    let clients = roles
        .chain(idle)
        .enumerate()
        .map(|(n, (client_id, role))| ClientSpec {
            client_id,
            role,
            source: config.source_ip(n),
        })
        .collect();
    let (audience, fan_out) = match config.scenario {
        Scenario::P2p | Scenario::Conn => (Audience::Paired, 1),
        Scenario::Sharedsub => (Audience::SharedGroup, 1),
        Scenario::Fanin | Scenario::Fanout => (Audience::Everyone, u64::from(subscribers)),
    };
    Plan {
        clients,
        publishers,
        subscribers,
        audience,
        fan_out,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(scenario: Scenario) -> Config {
        Config {
            scenario,
            pairs: 2,
            publishers: 3,
            subscribers: 2,
            clients: 4,
            topic_prefix: "t".into(),
            ..Config::default()
        }
    }

    #[test]
    fn p2p_pairs_each_publisher_with_its_own_subscriber() {
        let plan = plan(&config(Scenario::P2p));
        assert_eq!((plan.publishers, plan.subscribers, plan.fan_out), (2, 2, 1));
        assert_eq!(plan.clients.len(), 4);
        assert!(plan.clients.contains(&ClientSpec {
            client_id: "fmqb-s1".into(),
            role: Role::Subscriber {
                index: 1,
                filter: "t/p2p/1".into()
            },
            source: None,
        }));
        assert!(plan.clients.iter().any(|c| c.role
            == Role::Publisher {
                id: 1,
                topic: "t/p2p/1".into()
            }));
    }

    #[test]
    fn fan_scenarios_and_shared_groups() {
        let fanin = plan(&config(Scenario::Fanin));
        assert_eq!((fanin.fan_out, fanin.audience), (2, Audience::Everyone));
        let shared = plan(&config(Scenario::Sharedsub));
        assert_eq!(
            (shared.fan_out, shared.audience),
            (1, Audience::SharedGroup)
        );
        assert!(shared.clients.iter().any(|c| matches!(&c.role,
            Role::Subscriber { filter, .. } if filter == "$share/bench/t/shared/+")));
        let conn = plan(&config(Scenario::Conn));
        assert_eq!(conn.clients.len(), 4);
        assert!(conn.clients.iter().all(|c| c.role == Role::Idle));
    }
}
