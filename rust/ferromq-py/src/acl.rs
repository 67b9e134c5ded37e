//! The ACL's Python face: `AclRule` (one validated rule), `AclRules` (a compiled
//! list, shared by the engine without copying) and `AclBinding` (what a
//! connection's authentication says about it); and `AutoSubscription`, a filter
//! with the same placeholders that every client is given at CONNECT. Python parses the rules file and
//! the authentication answers (`ferromq.acl`); the core compiles and checks.

use std::collections::HashMap;
use std::sync::Arc;

use ferromq_core::acl::{template, AclTable, Action, Binding, Permission, Rule, Subject};
use ferromq_core::codec::QoS;
use ferromq_core::engine::AutoSubscription as CoreAutoSubscription;
use pyo3::prelude::*;

use crate::errors;

pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<AclRule>()?;
    m.add_class::<AclRules>()?;
    m.add_class::<AclBinding>()?;
    m.add_class::<AutoSubscription>()?;
    Ok(())
}

/// One rule; the constructor raises `ValueError` (one line) for a bad one.
#[pyclass(module = "ferromq._core", frozen)]
pub(crate) struct AclRule {
    rule: Rule,
}

#[pymethods]
impl AclRule {
    #[new]
    #[pyo3(signature = (permission, actions, topic, *, user = None, client_id = None, certificate = None, anonymous = false))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        permission: &str,
        actions: Vec<String>,
        topic: &str,
        user: Option<&str>,
        client_id: Option<&str>,
        certificate: Option<&str>,
        anonymous: bool,
    ) -> PyResult<AclRule> {
        let permission = match permission {
            "allow" => Permission::Allow,
            "deny" => Permission::Deny,
            other => {
                return Err(errors::bad_argument(format!(
                    "permission {other:?} is not allow or deny"
                )))
            }
        };
        let mut mask = 0;
        for name in &actions {
            mask |= Action::mask_of(name).map_err(|e| errors::bad_argument(e.to_string()))?;
        }
        let subject = match (user, client_id, certificate, anonymous) {
            (None, None, None, false) => Subject::All,
            (None, None, None, true) => Subject::Anonymous,
            (Some(name), None, None, false) => Subject::User(name.into()),
            (None, Some(id), None, false) => Subject::Client(id.into()),
            (None, None, Some(id), false) => Subject::Certificate(id.into()),
            _ => {
                return Err(errors::bad_argument(
                    "a rule is for one of user, client_id, certificate or anonymous",
                ))
            }
        };
        let rule = Rule::new(permission, mask, subject, topic)
            .map_err(|e| errors::bad_argument(format!("topic {topic:?}: {e}")))?;
        Ok(AclRule { rule })
    }
}

/// A compiled rule list, in order (first match wins).
#[pyclass(module = "ferromq._core", frozen)]
pub(crate) struct AclRules {
    pub(crate) table: Arc<AclTable>,
}

#[pymethods]
impl AclRules {
    #[new]
    fn new(rules: Vec<PyRef<'_, AclRule>>) -> AclRules {
        let table = AclTable::new(rules.iter().map(|r| r.rule.clone()));
        AclRules {
            table: Arc::new(table),
        }
    }

    fn __len__(&self) -> usize {
        self.table.len()
    }
}

/// What authentication says about a connection for the rules: the user name
/// (`%u`), the certificate identity (`%C`), string claims (`%{name}`) and the
/// rules its answer carried.
#[pyclass(module = "ferromq._core", frozen)]
pub(crate) struct AclBinding {
    pub(crate) binding: Binding,
    pub(crate) rules: Option<Arc<AclTable>>,
}

#[pymethods]
impl AclBinding {
    #[new]
    #[pyo3(signature = (username, certificate = None, claims = HashMap::new(), rules = None))]
    fn new(
        username: Option<&str>,
        certificate: Option<&str>,
        claims: HashMap<String, String>,
        rules: Option<PyRef<'_, AclRules>>,
    ) -> AclBinding {
        AclBinding {
            binding: Binding {
                username: username.map(Into::into),
                client_id: "".into(),
                certificate: certificate.map(Into::into),
                claims: claims
                    .into_iter()
                    .map(|(k, v)| (k.into_boxed_str(), v.into_boxed_str()))
                    .collect(),
            },
            rules: rules.map(|r| r.table.clone()),
        }
    }
}

/// One `[auto_subscribe]` filter (placeholders as in ACL rules) and its QoS; the
/// constructor raises `ValueError` (one line) for a bad one.
#[pyclass(module = "ferromq._core", frozen)]
pub(crate) struct AutoSubscription {
    pub(crate) subscription: CoreAutoSubscription,
}

#[pymethods]
impl AutoSubscription {
    #[new]
    fn new(topic: &str, qos: u8) -> PyResult<AutoSubscription> {
        let filter =
            template(topic).map_err(|e| errors::bad_argument(format!("topic {topic:?}: {e}")))?;
        let qos = QoS::from_u8(qos)
            .ok_or_else(|| errors::bad_argument(format!("qos {qos} is not 0, 1 or 2")))?;
        Ok(AutoSubscription {
            subscription: CoreAutoSubscription { filter, qos },
        })
    }
}
