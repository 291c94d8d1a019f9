//! `deserialize_with` helpers for request bodies the accelerator API has always read
//! more loosely than a plain serde type would: WSME turns `"1"` into an integer and
//! Cyborg's handlers treat a `null` as an absent field. Each reads exactly what the
//! server accepts, so moving a handler onto a DTO neither widens nor narrows it.

use serde::de::{self, Deserializer, Visitor};
use serde::Deserialize;
use std::fmt;

/// An absent field's default for `null` too (with `#[serde(default)]`).
pub fn null_default<'de, D, T>(d: D) -> Result<T, D::Error>
where
    D: Deserializer<'de>,
    T: Deserialize<'de> + Default,
{
    Option::<T>::deserialize(d).map(Option::unwrap_or_default)
}

/// A string as it is; any other JSON value (`null`, a number, ...) is `""`.
pub fn text_or_empty<'de, D: Deserializer<'de>>(d: D) -> Result<String, D::Error> {
    Ok(match serde_json::Value::deserialize(d)? {
        serde_json::Value::String(s) => s,
        _ => String::new(),
    })
}

/// A non-negative integer, or a string holding one (surrounding blanks allowed);
/// `null` is `None`. Fractions, negative numbers and other text are refused.
pub fn opt_group_id<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u64>, D::Error> {
    struct V;
    impl<'de> Visitor<'de> for V {
        type Value = Option<u64>;
        fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
            f.write_str("a non-negative integer")
        }
        fn visit_u64<E: de::Error>(self, v: u64) -> Result<Self::Value, E> {
            Ok(Some(v))
        }
        fn visit_i64<E: de::Error>(self, v: i64) -> Result<Self::Value, E> {
            u64::try_from(v)
                .map(Some)
                .map_err(|_| E::invalid_value(de::Unexpected::Signed(v), &self))
        }
        fn visit_str<E: de::Error>(self, v: &str) -> Result<Self::Value, E> {
            v.trim()
                .parse()
                .map(Some)
                .map_err(|_| E::invalid_value(de::Unexpected::Str(v), &self))
        }
        fn visit_none<E: de::Error>(self) -> Result<Self::Value, E> {
            Ok(None)
        }
        fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
            Ok(None)
        }
        fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
            d.deserialize_any(V)
        }
    }
    d.deserialize_option(V)
}

/// An integer, or a string that is exactly one (no blanks). Fractions are refused.
pub fn int_or_text<'de, D: Deserializer<'de>>(d: D) -> Result<i64, D::Error> {
    struct V;
    impl Visitor<'_> for V {
        type Value = i64;
        fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
            f.write_str("an integer")
        }
        fn visit_i64<E: de::Error>(self, v: i64) -> Result<i64, E> {
            Ok(v)
        }
        fn visit_u64<E: de::Error>(self, v: u64) -> Result<i64, E> {
            i64::try_from(v).map_err(|_| E::invalid_value(de::Unexpected::Unsigned(v), &self))
        }
        fn visit_str<E: de::Error>(self, v: &str) -> Result<i64, E> {
            v.parse()
                .map_err(|_| E::invalid_value(de::Unexpected::Str(v), &self))
        }
    }
    d.deserialize_any(V)
}

#[cfg(test)]
mod tests {
    use crate::accelerator::{NewArqs, NewAttribute, NewDeviceProfile, PatchOp, ProgramImage};
    use serde_json::{from_value, json};

    #[test]
    fn a_profile_without_name_or_groups_reads_empty() {
        for body in [json!({}), json!({"name": null, "groups": null})] {
            let p: NewDeviceProfile = from_value(body).unwrap();
            assert_eq!((p.name.as_str(), p.groups.len()), ("", 0));
        }
        let p: NewDeviceProfile = from_value(json!({
            "name": "dp", "groups": [{"resources:FPGA": 1, "trait:CUSTOM_A": "required"}],
            "description": null, "uuid": null,
        }))
        .unwrap();
        assert_eq!(p.groups[0]["resources:FPGA"], json!(1), "integers stay");
        assert_eq!((p.description, p.uuid), (None, None));
        assert!(from_value::<NewDeviceProfile>(json!({"name": 5})).is_err());
        assert!(from_value::<NewDeviceProfile>(json!({"name": "dp", "groups": "x"})).is_err());
    }

    #[test]
    fn a_group_id_may_be_a_string_or_null() {
        let id = |v| {
            from_value::<NewArqs>(
                json!({"device_profile_name": "dp", "device_profile_group_id": v}),
            )
            .map(|a| a.device_profile_group_id)
        };
        assert_eq!(id(json!(1)).unwrap(), Some(1));
        assert_eq!(id(json!(" 2 ")).unwrap(), Some(2));
        assert_eq!(id(json!(null)).unwrap(), None);
        assert_eq!(id(json!(u64::MAX)).unwrap(), Some(u64::MAX));
        for bad in [
            json!(-1),
            json!(1.0),
            json!("x"),
            json!("-1"),
            json!(true),
            json!([1]),
        ] {
            assert!(id(bad.clone()).is_err(), "{bad}");
        }
        let a: NewArqs = from_value(json!({"device_profile_name": "dp"})).unwrap();
        assert_eq!(a.device_profile_group_id, None);
        assert_eq!(
            serde_json::to_value(&a).unwrap(),
            json!({"device_profile_name": "dp"})
        );
    }

    #[test]
    fn a_patch_op_without_a_string_op_reads_as_none() {
        let op: PatchOp = from_value(json!({"path": "/hostname", "value": "h"})).unwrap();
        assert_eq!((op.op.as_str(), op.value), ("", Some(json!("h"))));
        let op: PatchOp = from_value(json!({"op": 3, "path": "/x", "value": null})).unwrap();
        assert_eq!((op.op.as_str(), op.value), ("", None));
        assert!(
            from_value::<PatchOp>(json!({"op": "add"})).is_err(),
            "path needed"
        );
        assert!(from_value::<PatchOp>(json!({"op": "add", "path": 1})).is_err());
    }

    #[test]
    fn a_deployable_id_may_be_a_string_holding_an_integer() {
        let id = |v| {
            from_value::<NewAttribute>(json!({"deployable_id": v, "key": "k", "value": "v"}))
                .map(|a| a.deployable_id)
        };
        assert_eq!(id(json!(7)).unwrap(), 7);
        assert_eq!(id(json!("7")).unwrap(), 7);
        assert_eq!(id(json!(-7)).unwrap(), -7);
        for bad in [
            json!(" 7"),
            json!(7.0),
            json!(null),
            json!(u64::MAX),
            json!("x"),
        ] {
            assert!(id(bad.clone()).is_err(), "{bad}");
        }
    }

    #[test]
    fn program_ops_are_upstreams() {
        let ops = crate::accelerator::program_ops("u");
        assert_eq!(
            serde_json::to_value(&ops).unwrap(),
            json!([{"op": "replace", "path": "/program", "value": [{"image_uuid": "u"}]}])
        );
        let image: Vec<ProgramImage> = from_value(ops[0].value.clone().unwrap()).unwrap();
        assert_eq!(image[0].image_uuid, "u");
    }
}
