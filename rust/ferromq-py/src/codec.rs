//! The codec's Python face: packets as dicts, decoded in batches.
//!
//! A packet is a `dict` with a `"type"` key (`"publish"`, `"suback"` ...) and the
//! fields of that packet under the specification's names; properties are a list of
//! `(name, value)` pairs in wire order. `FrameDecoder.decode_buffer` decodes every
//! complete frame in a buffer in one call, which is how the Cython receive buffer
//! uses it.

use bytes::{Bytes, BytesMut};
use ferromq_core::codec::{
    property_spec_by_name, Ack, ConnAck, Connect, FrameDecoder as CoreDecoder, Packet, Properties,
    Property, PropertyValue, ProtocolVersion, Publish, QoS, ReasonCode, ReasonOnly, RetainHandling,
    SubAck, Subscribe, SubscriptionOptions, UnsubAck, Unsubscribe, Utf8Bytes, Will,
    PROTOCOL_MAX_PACKET_SIZE,
};
use pyo3::buffer::PyBuffer;
use pyo3::intern;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyList, PyString, PyTuple};

use crate::buffer::with_bytes;
use crate::errors::{self, bad_packet, decode_error, encode_error};

pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<FrameDecoder>()?;
    m.add_class::<FrameBatch>()?;
    m.add_function(wrap_pyfunction!(encode, m)?)?;
    m.add_function(wrap_pyfunction!(encode_many, m)?)?;
    m.add_function(wrap_pyfunction!(reason_code_name, m)?)?;
    m.add("MAX_PACKET_SIZE", PROTOCOL_MAX_PACKET_SIZE)?;
    Ok(())
}

fn version_from_level(level: u8) -> PyResult<ProtocolVersion> {
    ProtocolVersion::from_level(level)
        .ok_or_else(|| errors::bad_argument(format!("unknown protocol version {level}")))
}

/// Streaming decoder: feed buffers, get every complete packet.
#[pyclass(module = "ferromq._core")]
pub(crate) struct FrameDecoder {
    inner: CoreDecoder,
}

#[pymethods]
impl FrameDecoder {
    #[new]
    #[pyo3(signature = (max_packet_size = PROTOCOL_MAX_PACKET_SIZE, protocol_version = None))]
    fn new(max_packet_size: u32, protocol_version: Option<u8>) -> PyResult<FrameDecoder> {
        let version = protocol_version.map(version_from_level).transpose()?;
        Ok(FrameDecoder {
            inner: CoreDecoder::new(max_packet_size, version),
        })
    }

    /// The protocol level in force: None until a CONNECT was decoded.
    #[getter]
    fn protocol_version(&self) -> Option<u8> {
        self.inner.version().map(ProtocolVersion::level)
    }

    #[getter]
    fn max_packet_size(&self) -> u32 {
        self.inner.max_packet_size()
    }

    /// Decode every complete frame at the start of `data`.
    ///
    /// Returns `(packets, consumed, error)`: the packets, how many bytes they used and
    /// the `CodecError` that stopped decoding (not raised, so the packets before it are
    /// never lost), or None.
    fn decode_buffer<'py>(
        &mut self,
        py: Python<'py>,
        data: PyBuffer<u8>,
    ) -> PyResult<(Bound<'py, PyList>, usize, Option<Py<PyAny>>)> {
        let (packets, consumed, error) = with_bytes(&data, |bytes| self.inner.decode_slice(bytes))?;
        let list = PyList::empty(py);
        for packet in &packets {
            list.append(packet_to_dict(py, packet)?)?;
        }
        let error = error.map(|err| decode_error(py, &err).into_value(py).into_any());
        Ok((list, consumed, error))
    }

    /// Decode every complete frame at the start of `data` into a `FrameBatch`: the
    /// packets stay in Rust and cross to Python column by column, on demand.
    fn decode_batch(&mut self, py: Python<'_>, data: PyBuffer<u8>) -> PyResult<FrameBatch> {
        let (packets, consumed, error) = with_bytes(&data, |bytes| self.inner.decode_slice(bytes))?;
        Ok(FrameBatch {
            packets,
            consumed,
            error: error.map(|err| decode_error(py, &err).into_value(py).into_any()),
        })
    }
}

/// The packets of one `decode_batch` call, kept in Rust. Columns (`packet_types`,
/// `packet_ids`, `qos`, `topics`, `payloads`) build one Python list or bytes each;
/// `packet(i)` and `packets()` give the full dict form.
#[pyclass(module = "ferromq._core", frozen)]
pub(crate) struct FrameBatch {
    packets: Vec<Packet>,
    #[pyo3(get)]
    consumed: usize,
    #[pyo3(get)]
    error: Option<Py<PyAny>>,
}

#[pymethods]
impl FrameBatch {
    fn __len__(&self) -> usize {
        self.packets.len()
    }

    /// The control packet type (1-15) of every packet, one byte each.
    fn packet_types<'py>(&self, py: Python<'py>) -> Bound<'py, PyBytes> {
        let types: Vec<u8> = self.packets.iter().map(|p| p.packet_type() as u8).collect();
        PyBytes::new(py, &types)
    }

    /// The QoS of every PUBLISH (0 for other packets), one byte each.
    fn qos<'py>(&self, py: Python<'py>) -> Bound<'py, PyBytes> {
        let qos: Vec<u8> = self
            .packets
            .iter()
            .map(|p| match p {
                Packet::Publish(publish) => publish.qos as u8,
                _ => 0,
            })
            .collect();
        PyBytes::new(py, &qos)
    }

    /// The packet identifier of every packet (0 where it has none).
    fn packet_ids(&self) -> Vec<u16> {
        self.packets.iter().map(packet_id).collect()
    }

    /// The topic of every PUBLISH, None for other packets.
    fn topics(&self) -> Vec<Option<&str>> {
        self.packets
            .iter()
            .map(|p| match p {
                Packet::Publish(publish) => Some(publish.topic.as_str()),
                _ => None,
            })
            .collect()
    }

    /// The payload of every PUBLISH, None for other packets.
    fn payloads<'py>(&self, py: Python<'py>) -> Vec<Option<Bound<'py, PyBytes>>> {
        self.packets
            .iter()
            .map(|p| match p {
                Packet::Publish(publish) => Some(PyBytes::new(py, &publish.payload)),
                _ => None,
            })
            .collect()
    }

    /// Packet `index` as a dict (the `decode_buffer` form).
    fn packet<'py>(&self, py: Python<'py>, index: usize) -> PyResult<Bound<'py, PyDict>> {
        let packet = self
            .packets
            .get(index)
            .ok_or_else(|| errors::out_of_range("packet"))?;
        packet_to_dict(py, packet)
    }

    /// Every packet as a dict.
    fn packets<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        let list = PyList::empty(py);
        for packet in &self.packets {
            list.append(packet_to_dict(py, packet)?)?;
        }
        Ok(list)
    }
}

fn packet_id(packet: &Packet) -> u16 {
    match packet {
        Packet::Publish(p) => p.packet_id,
        Packet::PubAck(a) | Packet::PubRec(a) | Packet::PubRel(a) | Packet::PubComp(a) => {
            a.packet_id
        }
        Packet::Subscribe(s) => s.packet_id,
        Packet::SubAck(s) => s.packet_id,
        Packet::Unsubscribe(u) => u.packet_id,
        Packet::UnsubAck(u) => u.packet_id,
        _ => 0,
    }
}

/// Encode one packet dict for a connection of `protocol_version`.
#[pyfunction]
#[pyo3(signature = (packet, protocol_version = 4))]
fn encode<'py>(
    py: Python<'py>,
    packet: &Bound<'py, PyDict>,
    protocol_version: u8,
) -> PyResult<Bound<'py, PyBytes>> {
    let version = version_from_level(protocol_version)?;
    let mut out = BytesMut::new();
    packet_from_dict(packet)?
        .encode(version, &mut out)
        .map_err(|err| encode_error(&err))?;
    Ok(PyBytes::new(py, &out))
}

/// Encode many packet dicts into one buffer.
#[pyfunction]
#[pyo3(signature = (packets, protocol_version = 4))]
fn encode_many<'py>(
    py: Python<'py>,
    packets: &Bound<'py, PyList>,
    protocol_version: u8,
) -> PyResult<Bound<'py, PyBytes>> {
    let version = version_from_level(protocol_version)?;
    let mut out = BytesMut::new();
    for item in packets.iter() {
        packet_from_dict(item.cast::<PyDict>()?)?
            .encode(version, &mut out)
            .map_err(|err| encode_error(&err))?;
    }
    Ok(PyBytes::new(py, &out))
}

/// The specification's name of a reason code, e.g. 0x95 → "Packet too large".
#[pyfunction]
fn reason_code_name(code: u8) -> PyResult<&'static str> {
    ReasonCode::from_u8(code)
        .map(ReasonCode::name)
        .ok_or_else(|| errors::bad_argument(format!("0x{code:02X} is not a reason code")))
}

// ---- Rust → Python -------------------------------------------------------------

fn packet_to_dict<'py>(py: Python<'py>, packet: &Packet) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    d.set_item(intern!(py, "type"), packet.packet_type().name())?;
    match packet {
        Packet::Connect(c) => {
            d.set_item(intern!(py, "protocol_version"), c.protocol.level())?;
            d.set_item(intern!(py, "clean_start"), c.clean_start)?;
            d.set_item(intern!(py, "keep_alive"), c.keep_alive)?;
            d.set_item(intern!(py, "client_id"), c.client_id.as_str())?;
            let will = match &c.will {
                Some(will) => {
                    let w = PyDict::new(py);
                    w.set_item(intern!(py, "topic"), will.topic.as_str())?;
                    w.set_item(intern!(py, "payload"), PyBytes::new(py, &will.payload))?;
                    w.set_item(intern!(py, "qos"), will.qos as u8)?;
                    w.set_item(intern!(py, "retain"), will.retain)?;
                    w.set_item(
                        intern!(py, "properties"),
                        properties_to_list(py, &will.properties)?,
                    )?;
                    Some(w)
                }
                None => None,
            };
            d.set_item(intern!(py, "will"), will)?;
            d.set_item(intern!(py, "username"), c.username.as_deref())?;
            d.set_item(
                intern!(py, "password"),
                c.password.as_ref().map(|p| PyBytes::new(py, p)),
            )?;
            d.set_item(
                intern!(py, "properties"),
                properties_to_list(py, &c.properties)?,
            )?;
        }
        Packet::ConnAck(c) => {
            d.set_item(intern!(py, "session_present"), c.session_present)?;
            d.set_item(intern!(py, "reason_code"), c.code)?;
            d.set_item(
                intern!(py, "properties"),
                properties_to_list(py, &c.properties)?,
            )?;
        }
        Packet::Publish(p) => {
            d.set_item(intern!(py, "topic"), p.topic.as_str())?;
            d.set_item(intern!(py, "payload"), PyBytes::new(py, &p.payload))?;
            d.set_item(intern!(py, "qos"), p.qos as u8)?;
            d.set_item(intern!(py, "retain"), p.retain)?;
            d.set_item(intern!(py, "dup"), p.dup)?;
            let packet_id = (p.qos != QoS::AtMostOnce).then_some(p.packet_id);
            d.set_item(intern!(py, "packet_id"), packet_id)?;
            d.set_item(
                intern!(py, "properties"),
                properties_to_list(py, &p.properties)?,
            )?;
        }
        Packet::PubAck(a) | Packet::PubRec(a) | Packet::PubRel(a) | Packet::PubComp(a) => {
            d.set_item(intern!(py, "packet_id"), a.packet_id)?;
            d.set_item(intern!(py, "reason_code"), a.reason as u8)?;
            d.set_item(
                intern!(py, "properties"),
                properties_to_list(py, &a.properties)?,
            )?;
        }
        Packet::Subscribe(s) => {
            d.set_item(intern!(py, "packet_id"), s.packet_id)?;
            let filters = PyList::empty(py);
            for (filter, options) in &s.filters {
                let f = PyDict::new(py);
                f.set_item(intern!(py, "filter"), filter.as_str())?;
                f.set_item(intern!(py, "qos"), options.qos as u8)?;
                f.set_item(intern!(py, "no_local"), options.no_local)?;
                f.set_item(
                    intern!(py, "retain_as_published"),
                    options.retain_as_published,
                )?;
                f.set_item(
                    intern!(py, "retain_handling"),
                    options.retain_handling as u8,
                )?;
                filters.append(f)?;
            }
            d.set_item(intern!(py, "filters"), filters)?;
            d.set_item(
                intern!(py, "properties"),
                properties_to_list(py, &s.properties)?,
            )?;
        }
        Packet::SubAck(s) => {
            d.set_item(intern!(py, "packet_id"), s.packet_id)?;
            d.set_item(intern!(py, "reason_codes"), reason_list(py, &s.reasons)?)?;
            d.set_item(
                intern!(py, "properties"),
                properties_to_list(py, &s.properties)?,
            )?;
        }
        Packet::Unsubscribe(u) => {
            d.set_item(intern!(py, "packet_id"), u.packet_id)?;
            let filters: Vec<&str> = u.filters.iter().map(Utf8Bytes::as_str).collect();
            d.set_item(intern!(py, "filters"), filters)?;
            d.set_item(
                intern!(py, "properties"),
                properties_to_list(py, &u.properties)?,
            )?;
        }
        Packet::UnsubAck(u) => {
            d.set_item(intern!(py, "packet_id"), u.packet_id)?;
            d.set_item(intern!(py, "reason_codes"), reason_list(py, &u.reasons)?)?;
            d.set_item(
                intern!(py, "properties"),
                properties_to_list(py, &u.properties)?,
            )?;
        }
        Packet::PingReq | Packet::PingResp => {}
        Packet::Disconnect(r) | Packet::Auth(r) => {
            d.set_item(intern!(py, "reason_code"), r.reason as u8)?;
            d.set_item(
                intern!(py, "properties"),
                properties_to_list(py, &r.properties)?,
            )?;
        }
    }
    Ok(d)
}

/// Reason codes as a `list` of ints, like every other sequence field (a `Vec<u8>` would
/// cross as `bytes`).
fn reason_list<'py>(py: Python<'py>, reasons: &[ReasonCode]) -> PyResult<Bound<'py, PyList>> {
    PyList::new(py, reasons.iter().map(|r| *r as u8))
}

fn properties_to_list<'py>(py: Python<'py>, props: &Properties) -> PyResult<Bound<'py, PyList>> {
    let list = PyList::empty(py);
    for property in props.iter() {
        let value: Bound<'py, PyAny> = match property.value() {
            PropertyValue::Integer(v) => v.into_pyobject(py)?.into_any(),
            PropertyValue::String(s) => PyString::new(py, &s).into_any(),
            PropertyValue::Binary(b) => PyBytes::new(py, &b).into_any(),
            PropertyValue::StringPair(k, v) => {
                PyTuple::new(py, [k.as_str(), v.as_str()])?.into_any()
            }
        };
        list.append((property.spec().name, value))?;
    }
    Ok(list)
}

// ---- Python → Rust -------------------------------------------------------------

fn required<'py>(d: &Bound<'py, PyDict>, key: &str) -> PyResult<Bound<'py, PyAny>> {
    d.get_item(key)?
        .ok_or_else(|| bad_packet(format!("packet needs the key {key:?}")))
}

fn optional<'py, T: for<'a> FromPyObject<'a, 'py, Error = PyErr>>(
    d: &Bound<'py, PyDict>,
    key: &str,
    default: T,
) -> PyResult<T> {
    match d.get_item(key)? {
        Some(value) if !value.is_none() => value.extract(),
        _ => Ok(default),
    }
}

fn utf8(value: &Bound<'_, PyAny>) -> PyResult<Utf8Bytes> {
    let s: String = value.extract()?;
    Utf8Bytes::try_from(s).map_err(|err| bad_packet(err.detail))
}

fn binary(value: &Bound<'_, PyAny>) -> PyResult<Bytes> {
    let b: Vec<u8> = value.extract()?;
    Ok(Bytes::from(b))
}

fn qos(value: u8) -> PyResult<QoS> {
    QoS::from_u8(value).ok_or_else(|| bad_packet(format!("QoS {value} is not 0, 1 or 2")))
}

fn reason(value: u8) -> PyResult<ReasonCode> {
    ReasonCode::from_u8(value)
        .ok_or_else(|| bad_packet(format!("0x{value:02X} is not a reason code")))
}

fn properties_of(d: &Bound<'_, PyDict>) -> PyResult<Properties> {
    let Some(list) = d.get_item("properties")? else {
        return Ok(Properties::new());
    };
    let mut items = Vec::new();
    for item in list.try_iter()? {
        let (name, value): (String, Bound<'_, PyAny>) = item?.extract()?;
        let spec = property_spec_by_name(&name)
            .ok_or_else(|| bad_packet(format!("unknown property {name:?}")))?;
        let value = if let Ok(number) = value.extract::<u32>() {
            PropertyValue::Integer(number)
        } else if let Ok((k, v)) = value.extract::<(Bound<'_, PyAny>, Bound<'_, PyAny>)>() {
            PropertyValue::StringPair(utf8(&k)?, utf8(&v)?)
        } else if value.is_instance_of::<PyString>() {
            PropertyValue::String(utf8(&value)?)
        } else {
            PropertyValue::Binary(binary(&value)?)
        };
        let property = Property::from_value(spec.id, value)
            .map_err(|err| bad_packet(format!("property {name:?}: {}", err.detail)))?;
        items.push(property);
    }
    Ok(Properties(items))
}

fn ack_of(d: &Bound<'_, PyDict>) -> PyResult<Ack> {
    Ok(Ack {
        packet_id: required(d, "packet_id")?.extract()?,
        reason: reason(optional(d, "reason_code", 0)?)?,
        properties: properties_of(d)?,
    })
}

fn reason_only_of(d: &Bound<'_, PyDict>) -> PyResult<ReasonOnly> {
    Ok(ReasonOnly {
        reason: reason(optional(d, "reason_code", 0)?)?,
        properties: properties_of(d)?,
    })
}

fn reasons_of(d: &Bound<'_, PyDict>) -> PyResult<Vec<ReasonCode>> {
    let codes: Vec<u8> = optional(d, "reason_codes", Vec::new())?;
    codes.into_iter().map(reason).collect()
}

fn retain_handling(value: u8) -> PyResult<RetainHandling> {
    match value {
        0 => Ok(RetainHandling::SendAtSubscribe),
        1 => Ok(RetainHandling::SendAtSubscribeIfNew),
        2 => Ok(RetainHandling::DoNotSend),
        _ => Err(bad_packet(format!(
            "retain_handling {value} is not 0, 1 or 2"
        ))),
    }
}

fn packet_from_dict(d: &Bound<'_, PyDict>) -> PyResult<Packet> {
    let kind: String = required(d, "type")?.extract()?;
    let packet = match kind.as_str() {
        "connect" => {
            let will = match d.get_item("will")? {
                Some(w) if !w.is_none() => {
                    let w = w.cast::<PyDict>()?;
                    Some(Will {
                        topic: utf8(&required(w, "topic")?)?,
                        payload: binary(&required(w, "payload")?)?,
                        qos: qos(optional(w, "qos", 0)?)?,
                        retain: optional(w, "retain", false)?,
                        properties: properties_of(w)?,
                    })
                }
                _ => None,
            };
            let username = match d.get_item("username")? {
                Some(u) if !u.is_none() => Some(utf8(&u)?),
                _ => None,
            };
            let password = match d.get_item("password")? {
                Some(p) if !p.is_none() => Some(binary(&p)?),
                _ => None,
            };
            Packet::Connect(Box::new(Connect {
                protocol: {
                    let level: u8 = optional(d, "protocol_version", 4)?;
                    ProtocolVersion::from_level(level)
                        .ok_or_else(|| bad_packet(format!("unknown protocol version {level}")))?
                },
                clean_start: optional(d, "clean_start", true)?,
                keep_alive: optional(d, "keep_alive", 60)?,
                properties: properties_of(d)?,
                client_id: match d.get_item("client_id")? {
                    Some(c) if !c.is_none() => utf8(&c)?,
                    _ => Utf8Bytes::default(),
                },
                will,
                username,
                password,
            }))
        }
        "connack" => Packet::ConnAck(ConnAck {
            session_present: optional(d, "session_present", false)?,
            code: optional(d, "reason_code", 0)?,
            properties: properties_of(d)?,
        }),
        "publish" => {
            let qos = qos(optional(d, "qos", 0)?)?;
            Packet::Publish(Publish {
                dup: optional(d, "dup", false)?,
                qos,
                retain: optional(d, "retain", false)?,
                topic: utf8(&required(d, "topic")?)?,
                packet_id: if qos == QoS::AtMostOnce {
                    0
                } else {
                    required(d, "packet_id")?.extract()?
                },
                properties: properties_of(d)?,
                payload: match d.get_item("payload")? {
                    Some(p) if !p.is_none() => binary(&p)?,
                    _ => Bytes::new(),
                },
            })
        }
        "puback" => Packet::PubAck(ack_of(d)?),
        "pubrec" => Packet::PubRec(ack_of(d)?),
        "pubrel" => Packet::PubRel(ack_of(d)?),
        "pubcomp" => Packet::PubComp(ack_of(d)?),
        "subscribe" => {
            let mut filters = Vec::new();
            for item in required(d, "filters")?.try_iter()? {
                let item = item?;
                let f = item.cast::<PyDict>()?;
                filters.push((
                    utf8(&required(f, "filter")?)?,
                    SubscriptionOptions {
                        qos: qos(optional(f, "qos", 0)?)?,
                        no_local: optional(f, "no_local", false)?,
                        retain_as_published: optional(f, "retain_as_published", false)?,
                        retain_handling: retain_handling(optional(f, "retain_handling", 0)?)?,
                    },
                ));
            }
            Packet::Subscribe(Subscribe {
                packet_id: required(d, "packet_id")?.extract()?,
                properties: properties_of(d)?,
                filters,
            })
        }
        "suback" => Packet::SubAck(SubAck {
            packet_id: required(d, "packet_id")?.extract()?,
            properties: properties_of(d)?,
            reasons: reasons_of(d)?,
        }),
        "unsubscribe" => {
            let mut filters = Vec::new();
            for item in required(d, "filters")?.try_iter()? {
                filters.push(utf8(&item?)?);
            }
            Packet::Unsubscribe(Unsubscribe {
                packet_id: required(d, "packet_id")?.extract()?,
                properties: properties_of(d)?,
                filters,
            })
        }
        "unsuback" => Packet::UnsubAck(UnsubAck {
            packet_id: required(d, "packet_id")?.extract()?,
            properties: properties_of(d)?,
            reasons: reasons_of(d)?,
        }),
        "pingreq" => Packet::PingReq,
        "pingresp" => Packet::PingResp,
        "disconnect" => Packet::Disconnect(reason_only_of(d)?),
        "auth" => Packet::Auth(reason_only_of(d)?),
        other => return Err(bad_packet(format!("unknown packet type {other:?}"))),
    };
    Ok(packet)
}
