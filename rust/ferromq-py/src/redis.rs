//! The Redis store's compiled half as Python sees it (`ferromq.storage.redis`):
//! `RedisCodec` turns a journal batch into one pipelined RESP buffer per node
//! (`[(node, bytes, commands)]`, one entry on a single server) and Redis's contents
//! back into journal records; `RedisReplies` reads the replies to a buffer in bulk.
//! Called once per batch, never per message.

use ferromq_core::store::redis::{RedisCodec as CoreCodec, SCRIPTS};
use ferromq_core::store::resp::{Replies, Reply};
use ferromq_core::store::slots;
use pyo3::prelude::*;
use pyo3::types::PyBytes;

use crate::errors;

/// `(node, resp_bytes, commands)` per node with commands.
type Buffers<'py> = Vec<(u16, Bound<'py, PyBytes>, usize)>;

fn buffers(py: Python<'_>, routed: Vec<(u16, bytes::Bytes, usize)>) -> Buffers<'_> {
    routed
        .into_iter()
        .map(|(node, bytes, count)| (node, PyBytes::new(py, &bytes), count))
        .collect()
}

pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<RedisCodec>()?;
    m.add_class::<RedisReplies>()?;
    m.add_function(wrap_pyfunction!(key_hash_slot, m)?)?;
    Ok(())
}

/// The Redis Cluster hash slot of `key`, as `CLUSTER KEYSLOT` computes it (the one
/// the codec routes by).
#[pyfunction]
fn key_hash_slot(key: &[u8]) -> u16 {
    slots::key_hash_slot(key)
}

#[pyclass(module = "ferromq._core")]
pub(crate) struct RedisCodec {
    inner: CoreCodec,
}

#[pymethods]
impl RedisCodec {
    #[new]
    #[pyo3(signature = (*, key_prefix, max_messages, message_ttl_ms))]
    fn new(key_prefix: &str, max_messages: u32, message_ttl_ms: u64) -> RedisCodec {
        RedisCodec {
            inner: CoreCodec::new(key_prefix, max_messages, message_ttl_ms),
        }
    }

    /// `(name, source)` of each Lua script, for SCRIPT LOAD.
    #[staticmethod]
    fn scripts() -> Vec<(&'static str, &'static str)> {
        SCRIPTS.to_vec()
    }

    /// The SHA1 SCRIPT LOAD returned for script `name`.
    fn set_sha(&mut self, name: &str, sha: &str) -> PyResult<()> {
        if self.inner.set_sha(name, sha) {
            Ok(())
        } else {
            Err(errors::bad_argument(format!("unknown script {name:?}")))
        }
    }

    /// Route over a Redis Cluster: `(first slot, last slot, node)` ranges (from
    /// CLUSTER SLOTS) that cover every slot; ValueError names a slot left without a
    /// node.
    fn set_slots(&mut self, ranges: Vec<(u16, u16, u16)>) -> PyResult<()> {
        self.inner.set_slots(&ranges).map_err(errors::store_error)
    }

    /// One journal batch as `[(node, resp_bytes, commands)]`; `eval` sends script
    /// sources.
    fn batch<'py>(
        &self,
        py: Python<'py>,
        data: &[u8],
        now_unix_ms: u64,
        eval: bool,
    ) -> PyResult<Buffers<'py>> {
        let routed = self
            .inner
            .batch(bytes::Bytes::copy_from_slice(data), now_unix_ms, eval)
            .map_err(errors::store_error)?;
        Ok(buffers(py, routed))
    }

    /// `SMEMBERS` of the client registry, as `(node, resp_bytes, 1)`.
    fn clients_command<'py>(&self, py: Python<'py>) -> (u16, Bound<'py, PyBytes>, usize) {
        let (node, bytes, count) = self.inner.clients_command();
        (node, PyBytes::new(py, &bytes), count)
    }

    /// The commands that read `clients` (and with `retained`, the retained
    /// messages), as `[(node, resp_bytes, commands)]`.
    fn load_commands<'py>(
        &self,
        py: Python<'py>,
        clients: Vec<String>,
        retained: bool,
        eval: bool,
    ) -> Buffers<'py> {
        buffers(py, self.inner.load_commands(&clients, retained, eval))
    }

    /// The replies to `load_commands`, `[(node, RedisReplies)]` in any order, as
    /// journal records for `Engine.restore` (merged back into command order here).
    fn load_records<'py>(
        &self,
        py: Python<'py>,
        clients: Vec<String>,
        replies: Vec<(u16, PyRef<'py, RedisReplies>)>,
    ) -> PyResult<Bound<'py, PyBytes>> {
        let kept: Vec<(u16, &[Reply])> = replies
            .iter()
            .map(|(node, r)| (*node, &r.kept[..]))
            .collect();
        let records = self
            .inner
            .load_records(&clients, &kept)
            .map_err(errors::store_error)?;
        Ok(PyBytes::new(py, &records))
    }
}

/// The replies to one pipelined buffer, read from chunks as they arrive.
#[pyclass(module = "ferromq._core")]
pub(crate) struct RedisReplies {
    reader: Replies,
    expected: usize,
    read: usize,
    keep: bool,
    kept: Vec<Reply>,
    errors: Vec<(usize, String)>,
}

#[pymethods]
impl RedisReplies {
    /// Expect `expected` replies; `keep` holds them for `RedisCodec.load_records`
    /// (a write batch only counts them and notes errors).
    #[new]
    #[pyo3(signature = (expected, *, keep = false))]
    fn new(expected: usize, keep: bool) -> RedisReplies {
        RedisReplies {
            reader: Replies::new(),
            expected,
            read: 0,
            keep,
            kept: Vec::new(),
            errors: Vec::new(),
        }
    }

    /// Take a chunk; True once every expected reply is in. Bytes that are not RESP
    /// raise ValueError.
    fn feed(&mut self, data: &[u8]) -> PyResult<bool> {
        self.reader.feed(data);
        while self.read < self.expected {
            let reply = self.reader.next_reply().map_err(errors::store_error)?;
            let Some(reply) = reply else {
                break;
            };
            if let Reply::Error(message) = &reply {
                self.errors.push((self.read, message.clone()));
            }
            if self.keep {
                self.kept.push(reply);
            }
            self.read += 1;
        }
        Ok(self.read == self.expected)
    }

    /// `(index, message)` of every error reply.
    fn errors(&self) -> Vec<(usize, String)> {
        self.errors.clone()
    }

    /// True when a script call met NOSCRIPT (Redis lost its script cache).
    fn noscript(&self) -> bool {
        self.errors.iter().any(|(_, m)| m.starts_with("NOSCRIPT"))
    }

    /// The string items of reply `index`, for a command whose reply is an array of
    /// strings (SMEMBERS); None when replies are not kept or it is not an array.
    fn strings(&self, index: usize) -> Option<Vec<String>> {
        let reply = self.kept.get(index)?;
        let Reply::Array(Some(items)) = reply else {
            return None;
        };
        Some(
            items
                .iter()
                .filter_map(Reply::bytes)
                .map(|b| String::from_utf8_lossy(b).into_owned())
                .collect(),
        )
    }
}
