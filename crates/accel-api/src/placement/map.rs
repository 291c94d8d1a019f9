//! The JSON shapes serde's std types cannot express as Placement writes them: an
//! object that keeps its keys in order ([`Map`]), a class-to-amount object
//! ([`Resources`]), and integers that may arrive as `1.0`.
//!
//! Placement's schemas accept `1.0` where they ask for an integer (the server's
//! validator, as upstream's, checks the value, not its spelling), so every integer a
//! request body carries deserialises leniently: an integral float is that integer.

use serde::de::{self, Deserializer, MapAccess, Visitor};
use serde::ser::{SerializeMap, Serializer};
use serde::{Deserialize, Serialize};
use std::fmt;
use std::marker::PhantomData;

/// A JSON object with its keys in document order (the order Placement writes them
/// in, and the order a request gave them).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Map<V>(pub Vec<(String, V)>);

impl<V> Default for Map<V> {
    fn default() -> Self {
        Map(Vec::new())
    }
}

impl<V> Map<V> {
    pub fn new() -> Self {
        Map(Vec::new())
    }
    pub fn len(&self) -> usize {
        self.0.len()
    }
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
    /// The value of `key` (the last one, as a JSON parser keeps).
    pub fn get(&self, key: &str) -> Option<&V> {
        self.0.iter().rev().find(|(k, _)| k == key).map(|(_, v)| v)
    }
    pub fn get_mut(&mut self, key: &str) -> Option<&mut V> {
        self.0
            .iter_mut()
            .rev()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v)
    }
    /// Sets `key`, keeping its place when it is already there.
    pub fn insert(&mut self, key: impl Into<String>, value: V) {
        let key = key.into();
        match self.get_mut(&key) {
            Some(slot) => *slot = value,
            None => self.0.push((key, value)),
        }
    }
    /// The value of `key`, inserted by `make` when missing.
    pub fn entry(&mut self, key: &str, make: impl FnOnce() -> V) -> &mut V {
        let i = match self.0.iter().position(|(k, _)| k == key) {
            Some(i) => i,
            None => {
                self.0.push((key.to_owned(), make()));
                self.0.len() - 1
            }
        };
        &mut self.0[i].1
    }
    pub fn keys(&self) -> impl Iterator<Item = &str> {
        self.0.iter().map(|(k, _)| k.as_str())
    }
    pub fn iter(&self) -> impl Iterator<Item = (&str, &V)> {
        self.0.iter().map(|(k, v)| (k.as_str(), v))
    }
}

impl<V> FromIterator<(String, V)> for Map<V> {
    fn from_iter<I: IntoIterator<Item = (String, V)>>(iter: I) -> Self {
        let mut m = Map::new();
        for (k, v) in iter {
            m.insert(k, v);
        }
        m
    }
}

impl<V> IntoIterator for Map<V> {
    type Item = (String, V);
    type IntoIter = std::vec::IntoIter<(String, V)>;
    fn into_iter(self) -> Self::IntoIter {
        self.0.into_iter()
    }
}

impl<V: Serialize> Serialize for Map<V> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut m = s.serialize_map(Some(self.0.len()))?;
        for (k, v) in &self.0 {
            m.serialize_entry(k, v)?;
        }
        m.end()
    }
}

impl<'de, V: Deserialize<'de>> Deserialize<'de> for Map<V> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V_<V>(PhantomData<V>);
        impl<'de, V: Deserialize<'de>> Visitor<'de> for V_<V> {
            type Value = Map<V>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a JSON object")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut a: A) -> Result<Map<V>, A::Error> {
                let mut m = Map::new();
                while let Some((k, v)) = a.next_entry::<String, V>()? {
                    m.insert(k, v);
                }
                Ok(m)
            }
        }
        d.deserialize_map(V_(PhantomData))
    }
}

/// An integer as a request body may spell it (`2` or `2.0`).
struct Lenient(i64);

impl<'de> Deserialize<'de> for Lenient {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = Lenient;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("an integer")
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<Lenient, E> {
                Ok(Lenient(v))
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<Lenient, E> {
                i64::try_from(v)
                    .map(Lenient)
                    .map_err(|_| E::custom("integer out of range"))
            }
            fn visit_f64<E: de::Error>(self, v: f64) -> Result<Lenient, E> {
                Ok(Lenient(v as i64))
            }
        }
        d.deserialize_any(V)
    }
}

/// `deserialize_with` for an `i64` field.
pub fn int<'de, D: Deserializer<'de>>(d: D) -> Result<i64, D::Error> {
    Lenient::deserialize(d).map(|l| l.0)
}

/// `deserialize_with` for an `Option<i64>` field (with `#[serde(default)]`).
pub fn opt_int<'de, D: Deserializer<'de>>(d: D) -> Result<Option<i64>, D::Error> {
    Option::<Lenient>::deserialize(d).map(|o| o.map(|l| l.0))
}

/// `deserialize_with` for a field that tells absent (`None`, with
/// `#[serde(default)]`) from `null` (`Some(None)`).
pub fn present<'de, D: Deserializer<'de>, T: Deserialize<'de>>(
    d: D,
) -> Result<Option<Option<T>>, D::Error> {
    Option::<T>::deserialize(d).map(Some)
}

/// `{resource class: amount}`, in the order given.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Resources(pub Vec<(String, i64)>);

impl Resources {
    pub fn get(&self, class: &str) -> Option<i64> {
        self.0
            .iter()
            .rev()
            .find(|(c, _)| c == class)
            .map(|(_, n)| *n)
    }
    /// Sets `class`, keeping its place when it is already there.
    pub fn insert(&mut self, class: impl Into<String>, amount: i64) {
        let class = class.into();
        match self.0.iter_mut().find(|(c, _)| *c == class) {
            Some(slot) => slot.1 = amount,
            None => self.0.push((class, amount)),
        }
    }
}

impl FromIterator<(String, i64)> for Resources {
    fn from_iter<I: IntoIterator<Item = (String, i64)>>(iter: I) -> Self {
        Resources(iter.into_iter().collect())
    }
}

impl Serialize for Resources {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut m = s.serialize_map(Some(self.0.len()))?;
        for (k, v) in &self.0 {
            m.serialize_entry(k, v)?;
        }
        m.end()
    }
}

impl<'de> Deserialize<'de> for Resources {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let m = Map::<Lenient>::deserialize(d)?;
        Ok(Resources(m.0.into_iter().map(|(k, v)| (k, v.0)).collect()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn maps_keep_order_and_integers_are_lenient() {
        let m: Map<i64> = serde_json::from_str(r#"{"b": 1, "a": 2, "b": 3}"#).unwrap();
        assert_eq!(m.0, vec![("b".into(), 3), ("a".into(), 2)]);
        assert_eq!(serde_json::to_string(&m).unwrap(), r#"{"b":3,"a":2}"#);
        let r: Resources = serde_json::from_str(r#"{"VCPU": 2.0, "DISK_GB": 5}"#).unwrap();
        assert_eq!(r.get("VCPU"), Some(2));
        assert_eq!(
            serde_json::to_string(&r).unwrap(),
            r#"{"VCPU":2,"DISK_GB":5}"#
        );
    }
}
