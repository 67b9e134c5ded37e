//! `RewriteRule`: one `[[rewrite.rules]]` entry compiled by the core
//! (`ferromq_core::engine::RewriteRule`); the constructor raises `ValueError` (one
//! line naming the part: `source`, `re` or `to`) for a bad one. Python reads the
//! config (`ferromq.rewrite`); the engine rewrites.

use ferromq_core::engine::{RewriteAction, RewriteRule as CoreRewriteRule};
use pyo3::prelude::*;

use crate::errors;

pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<RewriteRule>()?;
    Ok(())
}

#[pyclass(module = "ferromq._core", frozen)]
pub(crate) struct RewriteRule {
    pub(crate) rule: CoreRewriteRule,
}

#[pymethods]
impl RewriteRule {
    /// `action`: "publish", "subscribe" or "all".
    #[new]
    fn new(action: &str, source: &str, re: &str, to: &str) -> PyResult<RewriteRule> {
        let action = match action {
            "publish" => RewriteAction::Publish,
            "subscribe" => RewriteAction::Subscribe,
            "all" => RewriteAction::All,
            other => {
                return Err(errors::bad_argument(format!(
                    "action: expected \"publish\", \"subscribe\" or \"all\", got {other:?}"
                )))
            }
        };
        let rule = CoreRewriteRule::new(action, source, re, to).map_err(errors::bad_argument)?;
        Ok(RewriteRule { rule })
    }
}
