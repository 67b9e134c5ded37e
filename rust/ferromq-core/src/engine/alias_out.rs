//! Broker → client topic aliases (§3.3.2.3.4): per connection, a topic the broker
//! delivers gets an alias the first time (sent with the topic), and later PUBLISHes
//! carry the alias and an empty topic. Aliases never exceed the client's Topic
//! Alias Maximum [MQTT-3.3.2-11] nor the broker's `outbound_topic_aliases`; when
//! all are in use the least recently used one is given to the new topic, so hot
//! topics keep theirs.
//!
//! Cost per delivery: one hash lookup of the topic (foldhash: topics come from clients,
//! but a connection's table is capped small, so collisions cannot grow it); a miss with every alias taken
//! also scans the (small, capped) alias table for the oldest. An alias is chosen
//! before the write and committed only once the PUBLISH is in the output, so a
//! delivery dropped as too large never leaves the client without a mapping the
//! broker assumes it has. The one-property list an aliased PUBLISH needs is kept by
//! the engine between deliveries (`alias_scratch`) instead of allocated each time.

use hashbrown::HashMap;

use crate::codec::{Packet, Property, Utf8Bytes};

use super::{ConnId, Engine};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AliasUse {
    /// The client knows this alias for the topic: send it with an empty topic.
    Known(u16),
    /// Map the topic to this alias: send both.
    New(u16),
}

/// A connection's outbound aliases: the maximum, and the table once the first alias
/// is given (boxed, so a connection that never gets one keeps 16 bytes, not 80:
/// `docs/memory.md`).
#[derive(Debug, Default)]
pub struct OutboundAliases {
    max: u16,
    table: Option<Box<AliasTable>>,
}

#[derive(Debug, Default)]
struct AliasTable {
    by_topic: HashMap<Utf8Bytes, u16>,
    /// Index alias - 1: the topic and when it was last used (`clock`).
    slots: Vec<(Utf8Bytes, u64)>,
    clock: u64,
}

impl OutboundAliases {
    pub fn new(max: u16) -> OutboundAliases {
        OutboundAliases {
            max,
            ..OutboundAliases::default()
        }
    }

    /// The alias for a delivery on `topic`, or None when aliases are off.
    pub fn choose(&self, topic: &Utf8Bytes) -> Option<AliasUse> {
        if self.max == 0 {
            return None;
        }
        let Some(table) = self.table.as_deref() else {
            return Some(AliasUse::New(1));
        };
        if let Some(alias) = table.by_topic.get(topic) {
            return Some(AliasUse::Known(*alias));
        }
        if table.slots.len() < usize::from(self.max) {
            return Some(AliasUse::New(table.slots.len() as u16 + 1));
        }
        let oldest = (0..table.slots.len()).min_by_key(|&index| table.slots[index].1)?;
        Some(AliasUse::New(oldest as u16 + 1))
    }

    /// Record that a PUBLISH using `alias` for `topic` was sent.
    pub fn commit(&mut self, topic: &Utf8Bytes, alias: AliasUse) {
        let table = self.table.get_or_insert_with(Box::default);
        table.clock += 1;
        let clock = table.clock;
        match alias {
            AliasUse::Known(alias) => table.slots[usize::from(alias) - 1].1 = clock,
            AliasUse::New(alias) => {
                let index = usize::from(alias) - 1;
                if index == table.slots.len() {
                    table.slots.push((topic.clone(), clock));
                } else {
                    let (old, _) =
                        std::mem::replace(&mut table.slots[index], (topic.clone(), clock));
                    table.by_topic.remove(&old);
                }
                table.by_topic.insert(topic.clone(), alias);
            }
        }
    }
}

impl Engine {
    /// Write an outbound PUBLISH of `topic`, with the connection's alias for it when
    /// aliases are on. The alias is committed only if the PUBLISH was written; the
    /// property list it needs is recycled, so a delivery allocates nothing here.
    pub(super) fn write_publish(
        &mut self,
        conn: ConnId,
        mut packet: Packet,
        topic: &Utf8Bytes,
    ) -> bool {
        let alias = self
            .conns
            .get(conn as usize)
            .and_then(Option::as_ref)
            .and_then(|c| c.aliases_out.choose(topic));
        let (Some(alias), Packet::Publish(publish)) = (alias, &mut packet) else {
            return self.write(conn, &packet);
        };
        let number = match alias {
            AliasUse::Known(number) => {
                publish.topic = Utf8Bytes::default();
                number
            }
            AliasUse::New(number) => number,
        };
        if publish.properties.is_empty() {
            publish.properties.0 = std::mem::take(&mut self.alias_scratch);
        }
        publish.properties.0.push(Property::TopicAlias(number));
        let written = self.write(conn, &packet);
        if written {
            if let Some(conn) = self.conn_mut(conn) {
                conn.aliases_out.commit(topic, alias);
            }
        }
        if let Packet::Publish(publish) = packet {
            let mut spare = publish.properties.0;
            if spare.capacity() > self.alias_scratch.capacity() {
                spare.clear();
                self.alias_scratch = spare;
            }
        }
        written
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn topic(name: &'static str) -> Utf8Bytes {
        Utf8Bytes::from_static(name)
    }

    #[test]
    fn assigns_then_reuses_least_recently_used() {
        let mut aliases = OutboundAliases::new(2);
        for name in ["a", "b"] {
            let chosen = aliases.choose(&topic(name)).unwrap();
            aliases.commit(&topic(name), chosen);
        }
        assert_eq!(aliases.choose(&topic("a")), Some(AliasUse::Known(1)));
        aliases.commit(&topic("a"), AliasUse::Known(1));
        // "b" is now the least recently used: "c" takes its alias.
        assert_eq!(aliases.choose(&topic("c")), Some(AliasUse::New(2)));
        aliases.commit(&topic("c"), AliasUse::New(2));
        assert_eq!(aliases.choose(&topic("b")), Some(AliasUse::New(1)));
        assert_eq!(aliases.choose(&topic("c")), Some(AliasUse::Known(2)));
    }

    #[test]
    fn uncommitted_choice_changes_nothing() {
        let aliases = OutboundAliases::new(1);
        assert_eq!(aliases.choose(&topic("a")), Some(AliasUse::New(1)));
        assert_eq!(aliases.choose(&topic("a")), Some(AliasUse::New(1)));
        assert_eq!(OutboundAliases::new(0).choose(&topic("a")), None);
    }
}
