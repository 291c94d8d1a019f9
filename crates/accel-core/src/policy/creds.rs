//! Who is asking (credentials) and what about (target).
//!
//! Credentials mirror the dictionary oslo.context's `RequestContext.to_policy_values()`
//! hands to oslo.policy, so that generic checks such as `project_id:%(project_id)s` or
//! `system_scope:all` find the same keys with the same string forms. The server builds
//! them from the Keystone (or noauth2) headers; nothing here parses HTTP.

use std::collections::BTreeMap;

use super::rules::Scope;

/// The caller's identity as policy sees it.
///
/// A missing value is `None`; oslo.policy compares it as the text `None`, which is what
/// Python's `str(None)` gives, and this engine does the same.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Credentials {
    /// Role names, as Keystone expands them (an admin normally also has member and
    /// reader). Role checks compare them case-insensitively.
    pub roles: Vec<String>,
    pub project_id: Option<String>,
    pub user_id: Option<String>,
    /// `all` for a system-scoped token (header `OpenStack-System-Scope`).
    pub system_scope: Option<String>,
    /// Set for a domain-scoped token.
    pub domain_id: Option<String>,
    pub user_domain_id: Option<String>,
    pub project_domain_id: Option<String>,
    /// oslo.context defaults this to true when the header is absent.
    pub is_admin_project: bool,
    pub service_user_id: Option<String>,
    pub service_user_domain_id: Option<String>,
    pub service_project_id: Option<String>,
    pub service_project_domain_id: Option<String>,
    pub service_roles: Vec<String>,
    /// Cyborg adds `is_admin` (`'admin' in X-Roles`) to the values it enforces with, so
    /// its legacy rules can say `is_admin:True`; Placement does not (`None`: the key is
    /// absent and such a check is false).
    pub is_admin: Option<bool>,
}

impl Default for Credentials {
    fn default() -> Self {
        Credentials {
            roles: Vec::new(),
            project_id: None,
            user_id: None,
            system_scope: None,
            domain_id: None,
            user_domain_id: None,
            project_domain_id: None,
            is_admin_project: true,
            service_user_id: None,
            service_user_domain_id: None,
            service_project_id: None,
            service_project_domain_id: None,
            service_roles: Vec::new(),
            is_admin: None,
        }
    }
}

/// A credential value in the shapes oslo.policy's generic check can meet.
#[derive(Debug, Clone, Copy)]
pub(crate) enum CredValue<'a> {
    Text(Option<&'a str>),
    Bool(bool),
    List(&'a [String]),
}

fn non_empty(v: &Option<String>) -> bool {
    v.as_deref().is_some_and(|s| !s.is_empty())
}

impl Credentials {
    /// The token's scope, decided the way oslo.policy does: a (non-empty) system scope
    /// wins, then a domain, and anything else counts as project-scoped.
    pub fn token_scope(&self) -> Scope {
        if non_empty(&self.system_scope) {
            Scope::System
        } else if non_empty(&self.domain_id) {
            Scope::Domain
        } else {
            Scope::Project
        }
    }

    /// The value under `key` in `to_policy_values()`, or `None` when that dictionary
    /// has no such key (a generic check on it is false). oslo.policy also copies a
    /// non-empty `system_scope` to `system`, for rules written before oslo.context
    /// named it.
    pub(crate) fn lookup(&self, key: &str) -> Option<CredValue<'_>> {
        fn text(v: &Option<String>) -> CredValue<'_> {
            CredValue::Text(v.as_deref())
        }
        Some(match key {
            "roles" => CredValue::List(&self.roles),
            "project_id" => text(&self.project_id),
            "user_id" => text(&self.user_id),
            "system_scope" => text(&self.system_scope),
            "system" if non_empty(&self.system_scope) => text(&self.system_scope),
            "domain_id" => text(&self.domain_id),
            "user_domain_id" => text(&self.user_domain_id),
            "project_domain_id" => text(&self.project_domain_id),
            "is_admin_project" => CredValue::Bool(self.is_admin_project),
            "service_user_id" => text(&self.service_user_id),
            "service_user_domain_id" => text(&self.service_user_domain_id),
            "service_project_id" => text(&self.service_project_id),
            "service_project_domain_id" => text(&self.service_project_domain_id),
            "service_roles" => CredValue::List(&self.service_roles),
            "is_admin" => CredValue::Bool(self.is_admin?),
            _ => return None,
        })
    }
}

/// Attributes of the object acted on, substituted into `%(name)s` in check strings.
///
/// Placement passes `{"project_id": <query project_id>}` for `GET /usages` and, for
/// every other rule, oslo's default `{"project_id": ..., "user_id": ...}` of the caller
/// ([`Target::from_credentials`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Target(BTreeMap<String, String>);

impl Target {
    pub fn new() -> Self {
        Target::default()
    }

    /// Builder form of [`Target::insert`].
    pub fn with(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        self.insert(key, value);
        self
    }

    pub fn insert(&mut self, key: impl Into<String>, value: impl Into<String>) {
        self.0.insert(key.into(), value.into());
    }

    pub fn get(&self, key: &str) -> Option<&str> {
        self.0.get(key).map(String::as_str)
    }

    /// The target Placement's `RequestContext.can` uses when a handler passes none:
    /// the caller's own project and user. A missing id becomes `None`, as Python's
    /// `"%(project_id)s" % {"project_id": None}` does.
    pub fn from_credentials(creds: &Credentials) -> Self {
        let show = |v: &Option<String>| v.clone().unwrap_or_else(|| "None".to_owned());
        Target::new()
            .with("project_id", show(&creds.project_id))
            .with("user_id", show(&creds.user_id))
    }
}

impl<K: Into<String>, V: Into<String>> FromIterator<(K, V)> for Target {
    fn from_iter<I: IntoIterator<Item = (K, V)>>(iter: I) -> Self {
        Target(
            iter.into_iter()
                .map(|(k, v)| (k.into(), v.into()))
                .collect(),
        )
    }
}
