//! Per user name state the engine keeps for limits: the user's publish rate buckets
//! (shared by all of its connections, `rate`) and the retained messages it owns
//! (count and bytes, `retained_store`).
//!
//! A user is an entry in a slab, named by a `UserId` that connections and retained
//! messages hold, so the PUBLISH path indexes a vector instead of hashing the name.
//! An entry lives while a connection or a retained message refers to it and is freed
//! with the last reference, so client-chosen names cannot grow the table beyond the
//! connections and retained messages that exist. Connections without a user name
//! have no entry: per-user limits do not apply to them. O(1) per operation but
//! `acquire`, which hashes the name once per CONNECT.

use std::collections::HashMap;

use super::rate::PublishRate;

pub type UserId = u32;

#[derive(Debug)]
pub struct User {
    name: Box<str>,
    connections: u32,
    /// The user's publish rate, when `limits` set one (built at its first CONNECT).
    pub rate: Option<PublishRate>,
    pub retained_count: u64,
    pub retained_bytes: u64,
}

#[derive(Debug, Default)]
pub struct Users {
    slots: Vec<Option<User>>,
    free: Vec<UserId>,
    by_name: HashMap<Box<str>, UserId>,
}

impl Users {
    /// The entry for `name`, created if needed; `make_rate` builds a new entry's
    /// rate buckets. Pair with `release_connection`.
    pub fn acquire(
        &mut self,
        name: &str,
        make_rate: impl FnOnce() -> Option<PublishRate>,
    ) -> UserId {
        let id = self.entry(name, make_rate);
        self.slots[id as usize]
            .as_mut()
            .expect("entry made above")
            .connections += 1;
        id
    }

    fn entry(&mut self, name: &str, make_rate: impl FnOnce() -> Option<PublishRate>) -> UserId {
        if let Some(&id) = self.by_name.get(name) {
            return id;
        }
        let user = User {
            name: name.into(),
            connections: 0,
            rate: make_rate(),
            retained_count: 0,
            retained_bytes: 0,
        };
        let id = match self.free.pop() {
            Some(id) => {
                self.slots[id as usize] = Some(user);
                id
            }
            None => {
                self.slots.push(Some(user));
                (self.slots.len() - 1) as UserId
            }
        };
        self.by_name.insert(name.into(), id);
        id
    }

    pub fn get_mut(&mut self, id: UserId) -> Option<&mut User> {
        self.slots.get_mut(id as usize).and_then(Option::as_mut)
    }

    pub fn get(&self, id: UserId) -> Option<&User> {
        self.slots.get(id as usize).and_then(Option::as_ref)
    }

    pub fn release_connection(&mut self, id: UserId) {
        if let Some(user) = self.get_mut(id) {
            user.connections = user.connections.saturating_sub(1);
        }
        self.free_if_unused(id);
    }

    /// Drop the entry once nothing refers to it.
    pub fn free_if_unused(&mut self, id: UserId) {
        let unused = self
            .get(id)
            .is_some_and(|u| u.connections == 0 && u.retained_count == 0);
        if unused {
            let user = self.slots[id as usize].take().expect("checked above");
            self.by_name.remove(&user.name);
            self.free.push(id);
        }
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.by_name.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_entry_lives_while_connections_or_retained_messages_hold_it() {
        let mut users = Users::default();
        let a = users.acquire("ann", || None);
        assert_eq!(users.acquire("ann", || unreachable!()), a);
        users.release_connection(a);
        assert_eq!(users.len(), 1);
        users.get_mut(a).unwrap().retained_count = 1;
        users.release_connection(a);
        assert_eq!(users.len(), 1);
        users.get_mut(a).unwrap().retained_count = 0;
        users.free_if_unused(a);
        assert_eq!(users.len(), 0);
        assert_eq!(users.acquire("bob", || None), a, "the slot is reused");
    }
}
