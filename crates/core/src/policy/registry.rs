//! The policy registry: every policy registers itself in its own file with one
//! [`Registration`] (its name, help, typed parameters and how to build it), and `policy/mod.rs`
//! lists it once in `registry!`. Adding a policy touches its file and that one line; the switch,
//! the simulator and the lab find it by name here and learn what it reads from
//! [`super::Policy::needs`].
//!
//! A [`PolicySpec`] is a name and the parameters as written (a TOML table); the policy's own
//! `Params` struct (serde, `deny_unknown_fields`, the paper's defaults) checks them when the spec
//! is parsed and reads them when it is built.

use std::fmt;

use serde::de::{DeserializeOwned, Error as _};
use serde::ser::SerializeMap;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use super::{Policy, PolicyContext, PolicyError, REGISTRY};

/// A policy's parameters as written: a table of values (TOML's, so `inf` survives).
pub type Params = toml::Table;

/// Builds a policy from its parameters for a cluster of a given shape.
pub type Builder = fn(&Params, &PolicyContext<'_>) -> Result<Box<dyn Policy>, PolicyError>;

/// One policy's entry in the registry.
pub struct Registration {
    /// The configuration name (`lard`, `cap`, …).
    pub name: &'static str,
    /// One line for help texts.
    pub about: &'static str,
    /// Its parameters and their defaults, one line for help texts (empty: none).
    pub params: &'static str,
    /// It takes a `seed` parameter (the simulator derives one per replication when none is
    /// given, so replications differ).
    pub seeded: bool,
    /// Checks the parameters (unknown names, wrong types), giving serde's message.
    pub check: fn(&Params) -> Result<(), String>,
    /// Builds the policy for a cluster of this shape.
    pub build: Builder,
}

/// The parameters of a policy that has none: any key is refused.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NoParams {}

/// `check` for a policy whose parameters deserialize into `P`.
pub fn check<P: DeserializeOwned>(params: &Params) -> Result<(), String> {
    typed::<P>(params).map(|_| ())
}

/// The parameters read into the policy's own type.
pub fn typed<P: DeserializeOwned>(params: &Params) -> Result<P, String> {
    toml::Value::Table(params.clone())
        .try_into()
        .map_err(|e: toml::de::Error| e.message().trim().to_string())
}

/// `typed` for `build`, with the error naming the policy.
pub fn read<P: DeserializeOwned>(name: &str, params: &Params) -> Result<P, PolicyError> {
    typed(params).map_err(|e| PolicyError::Invalid(format!("{name}: {e}")))
}

/// Every registered policy, in registry order.
pub fn registrations() -> impl Iterator<Item = &'static Registration> {
    REGISTRY.iter().copied()
}

/// The registration of a policy by name.
pub fn lookup(name: &str) -> Option<&'static Registration> {
    registrations().find(|r| r.name == name)
}

/// A policy and its parameters as written in the configuration (`[policy]` table, `name` key).
///
/// Every parameter has a default (taken from the paper the policy comes from where it gives
/// one), so `name = "lard"` alone is a complete table. Unknown parameters are refused when the
/// spec is parsed, invalid values when it is built.
#[derive(Clone, PartialEq)]
pub struct PolicySpec {
    name: &'static str,
    params: Params,
}

impl PolicySpec {
    /// The spec of a policy with default parameters, by name.
    pub fn with_defaults(name: &str) -> Result<PolicySpec, PolicyError> {
        Self::new(name, Params::new())
    }

    /// A spec from a name and parameters, checked against the policy's parameter type.
    pub fn new(name: &str, params: Params) -> Result<PolicySpec, PolicyError> {
        let reg = lookup(name).ok_or_else(|| PolicyError::UnknownPolicy(name.to_string()))?;
        (reg.check)(&params).map_err(PolicyError::Invalid)?;
        Ok(PolicySpec {
            name: reg.name,
            params,
        })
    }

    pub fn name(&self) -> &'static str {
        self.name
    }

    pub fn registration(&self) -> &'static Registration {
        lookup(self.name).expect("a spec's name is registered")
    }

    /// The parameters as written (defaults not filled in).
    pub fn params(&self) -> &Params {
        &self.params
    }

    /// A parameter as written, if it was.
    pub fn param(&self, key: &str) -> Option<&toml::Value> {
        self.params.get(key)
    }

    /// The same spec with one parameter set (checked like a written one).
    pub fn with_param(&self, key: &str, value: toml::Value) -> Result<PolicySpec, PolicyError> {
        let mut params = self.params.clone();
        params.insert(key.to_string(), value);
        Self::new(self.name, params)
    }

    /// Every policy name, for help texts and error messages.
    pub fn names() -> Vec<&'static str> {
        registrations().map(|r| r.name).collect()
    }
}

impl fmt::Debug for PolicySpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "PolicySpec({}", self.name)?;
        for (k, v) in &self.params {
            write!(f, ", {k} = {v}")?;
        }
        write!(f, ")")
    }
}

impl Serialize for PolicySpec {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut map = serializer.serialize_map(Some(self.params.len() + 1))?;
        map.serialize_entry("name", self.name)?;
        for (k, v) in &self.params {
            map.serialize_entry(k, v)?;
        }
        map.end()
    }
}

impl<'de> Deserialize<'de> for PolicySpec {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let mut params = Params::deserialize(deserializer)?;
        let name = match params.remove("name") {
            Some(toml::Value::String(name)) => name,
            Some(other) => {
                return Err(D::Error::custom(format!(
                    "policy name must be a string, got {}",
                    other.type_str()
                )))
            }
            None => return Err(D::Error::missing_field("name")),
        };
        let Some(reg) = lookup(&name) else {
            return Err(D::Error::custom(format!(
                "unknown policy `{name}` (known: {})",
                PolicySpec::names().join(", ")
            )));
        };
        (reg.check)(&params).map_err(D::Error::custom)?;
        Ok(PolicySpec {
            name: reg.name,
            params,
        })
    }
}
