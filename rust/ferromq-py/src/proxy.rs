//! The PROXY protocol header parser's Python face (`ferromq_core::transport::proxy`):
//! called by the listener once per connection on a `proxy_protocol` listener, with the
//! bytes read so far, never per message.

use ferromq_core::transport::proxy;
use pyo3::prelude::*;

use crate::errors;

pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<ProxyHeader>()?;
    m.add_function(wrap_pyfunction!(parse_proxy_header, m)?)?;
    Ok(())
}

/// A complete PROXY header: its `version` (1 or 2), the bytes it takes (`length`), and
/// the client it names as `(host, port)` (None: a v1 UNKNOWN, a v2 LOCAL health check,
/// an unspecified or UNIX family; the socket's own address stands).
#[pyclass(module = "ferromq._core", frozen, get_all)]
pub(crate) struct ProxyHeader {
    version: u8,
    length: usize,
    source: Option<(String, u16)>,
}

/// The PROXY header at the front of `data`: a `ProxyHeader`, None when it is not
/// complete yet (then every byte of `data` is part of it), or ValueError naming what
/// is wrong.
#[pyfunction]
fn parse_proxy_header(data: &[u8]) -> PyResult<Option<ProxyHeader>> {
    let header = proxy::parse(data).map_err(errors::proxy_header)?;
    Ok(header.map(|header| ProxyHeader {
        version: header.version,
        length: header.len,
        source: header
            .source
            .map(|address| (address.ip().to_string(), address.port())),
    }))
}
