//! Query-string grammars shared by `GET /resource_providers` and
//! `GET /allocation_candidates`: `resources`, `required`, `member_of`, `in_tree`.
//! Messages follow upstream's wording because clients and tests match them.

use super::error::{ApiError, ApiResult};
use super::Req;
use accel_api::placement::mv;
use accel_api::python::py_int;

/// `RC:N,RC:N` in request order; amounts must be integers >= 1.
pub fn resources(qs: &str) -> ApiResult<Vec<(String, i64)>> {
    if qs.trim().is_empty() {
        return Err(ApiError::bad_request(
            "Badly formed resources parameter. Expected resources query string parameter in form: ?resources=VCPU:2,MEMORY_MB:1024. Got: empty string.",
        ));
    }
    let mut out: Vec<(String, i64)> = Vec::new();
    for rt in qs.split(',') {
        let parts: Vec<&str> = rt.split(':').collect();
        if parts.len() != 2 {
            return Err(ApiError::bad_request(format!(
                "Badly formed resources parameter. Expected resources query string parameter in form: ?resources=VCPU:2,MEMORY_MB:1024. Got: {rt}."
            )));
        }
        let (rc, amount) = (parts[0], parts[1]);
        // Python's int, as far as an i64 holds it whatever the sign.
        let amount: i64 = py_int(amount)
            .and_then(|v| i64::try_from(v).ok())
            .filter(|v| *v != i64::MIN)
            .ok_or_else(|| {
                ApiError::bad_request(format!(
                    "Requested resource {rc} expected positive integer amount. Got: {amount}."
                ))
            })?;
        if amount < 1 {
            return Err(ApiError::bad_request(format!(
                "Requested resource {rc} requires amount >= 1. Got: {amount}."
            )));
        }
        match out.iter_mut().find(|(n, _)| n == rc) {
            Some(slot) => slot.1 = amount,
            None => out.push((rc.to_owned(), amount)),
        }
    }
    Ok(out)
}

/// Parsed `required` values: AND of any-of lists, and a forbidden set.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct TraitQuery {
    pub required: Vec<Vec<String>>,
    pub forbidden: Vec<String>,
}

/// One `required` value.
pub fn trait_value(val: &str, allow_forbidden: bool, allow_any: bool) -> ApiResult<TraitQuery> {
    if let Some(rest) = val.strip_prefix("in:") {
        if !allow_any {
            return Err(ApiError::bad_request(format!(
                "Invalid query string parameters: The format 'in:HW_CPU_X86_VMX,CUSTOM_MAGIC' only supported since microversion 1.39. Got: {val}"
            )));
        }
        let mut any: Vec<String> = rest.split(',').map(|s| s.trim().to_owned()).collect();
        if any.iter().any(String::is_empty) {
            return Err(ApiError::bad_request(format!(
                "Invalid query string parameters: Expected 'required' parameter value of the form: in:HW_CPU_X86_VMX,CUSTOM_MAGIC. Got an empty trait in: {val}"
            )));
        }
        if any.iter().any(|t| t.starts_with('!')) {
            return Err(ApiError::bad_request(format!(
                "Invalid query string parameters: The format 'in:HW_CPU_X86_VMX,CUSTOM_MAGIC' does not support forbidden traits. Got: {val}"
            )));
        }
        any.sort();
        any.dedup();
        return Ok(TraitQuery {
            required: vec![any],
            forbidden: vec![],
        });
    }
    let all: Vec<String> = val.split(',').map(|s| s.trim().to_owned()).collect();
    let forbidden: Vec<String> = all
        .iter()
        .filter(|t| t.starts_with('!'))
        .map(|t| t.trim_start_matches('!').to_owned())
        .collect();
    if all.iter().chain(forbidden.iter()).any(String::is_empty) {
        let form = if allow_forbidden {
            "HW_CPU_X86_VMX,!CUSTOM_MAGIC"
        } else {
            "HW_CPU_X86_VMX,CUSTOM_MAGIC"
        };
        return Err(ApiError::bad_request(format!(
            "Invalid query string parameters: Expected 'required' parameter value of the form: {form}. Got an empty trait in: {val}"
        )));
    }
    if !forbidden.is_empty() && !allow_forbidden {
        return Err(ApiError::bad_request(format!(
            "Invalid query string parameters: Expected 'required' parameter value of the form: HW_CPU_X86_VMX,CUSTOM_MAGIC. Got: {val}"
        )));
    }
    let required = all
        .into_iter()
        .filter(|t| !t.starts_with('!'))
        .map(|t| vec![t])
        .collect();
    Ok(TraitQuery {
        required,
        forbidden,
    })
}

/// All `required{suffix}` values of a request (only the last before 1.39).
pub fn traits(req: &Req, key: &str) -> ApiResult<TraitQuery> {
    let allow_forbidden = req.mv(mv::FORBIDDEN_TRAITS);
    let allow_any = req.mv(mv::ANY_TRAITS);
    let mut values = req.query_all(key);
    if !allow_any && values.len() > 1 {
        values = values.split_off(values.len() - 1);
    }
    let mut out = TraitQuery::default();
    for v in values {
        let q = trait_value(v, allow_forbidden, allow_any)?;
        out.required.extend(q.required);
        for f in q.forbidden {
            if !out.forbidden.contains(&f) {
                out.forbidden.push(f);
            }
        }
    }
    Ok(out)
}

/// Parsed `member_of` values: AND of any-of aggregate lists, and a forbidden set.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct AggQuery {
    pub required: Vec<Vec<String>>,
    pub forbidden: Vec<String>,
}

/// All `member_of{suffix}` values, with upstream's microversion rules.
pub fn member_of(req: &Req, key: &str, suffix: &str) -> ApiResult<AggQuery> {
    let values = req.query_all(key);
    if !req.mv(mv::MEMBER_OF_REPEATED) && values.len() > 1 {
        return Err(ApiError::bad_request(format!(
            "Multiple member_of{suffix} parameters are not supported"
        )));
    }
    let mut out = AggQuery::default();
    for value in values {
        if value.contains(',') && !(value.starts_with("in:") || value.starts_with("!in:")) {
            return Err(ApiError::bad_request(format!(
                "Multiple values for 'member_of' must be prefixed with the 'in:' or '!in:' keyword using the valid microversion. Got: {value}"
            )));
        }
        let (required, forbidden): (Vec<&str>, Vec<&str>) =
            if let Some(r) = value.strip_prefix("!in:") {
                (vec![], r.split(',').collect())
            } else if let Some(r) = value.strip_prefix('!') {
                (vec![], vec![r])
            } else if let Some(r) = value.strip_prefix("in:") {
                (r.split(',').collect(), vec![])
            } else {
                (vec![value], vec![])
            };
        for a in required.iter().chain(forbidden.iter()) {
            if !is_uuid_like(a) {
                return Err(ApiError::bad_request(format!(
                    "Invalid query string parameters: Expected 'member_of' parameter to contain valid UUID(s). Got: {a}"
                )));
            }
        }
        if !required.is_empty() {
            let mut r: Vec<String> = required.iter().map(|s| normalize_uuid(s)).collect();
            r.sort();
            r.dedup();
            out.required.push(r);
        }
        if !forbidden.is_empty() {
            if !req.mv(mv::FORBIDDEN_AGGREGATES) {
                return Err(ApiError::bad_request(format!(
                    "Forbidden member_of{suffix} parameters are not supported in the specified microversion"
                )));
            }
            for f in forbidden {
                let f = normalize_uuid(f);
                if !out.forbidden.contains(&f) {
                    out.forbidden.push(f);
                }
            }
        }
    }
    Ok(out)
}

/// An `in_tree{suffix}` value.
pub fn in_tree(value: &str) -> ApiResult<String> {
    let v = value.trim();
    if !is_uuid_like(v) {
        return Err(ApiError::bad_request(format!(
            "Invalid query string parameters: Expected 'in_tree' parameter to be a format of uuid. Got: {value}"
        )));
    }
    Ok(normalize_uuid(v))
}

/// oslo's `is_uuid_like` ([`accel_core::ids`]) of a query value, surrounding blanks
/// ignored.
pub fn is_uuid_like(s: &str) -> bool {
    accel_core::ids::is_uuid_like(s.trim())
}

/// The canonical lower-case dashed form, or the input unchanged when not a uuid.
pub fn normalize_uuid(s: &str) -> String {
    accel_core::ids::canonical_uuid(s.trim()).unwrap_or_else(|| s.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resources_grammar() {
        assert_eq!(
            resources("VCPU:2,MEMORY_MB:1024").unwrap(),
            vec![("VCPU".into(), 2), ("MEMORY_MB".into(), 1024)]
        );
        assert!(resources("").is_err());
        assert!(resources("VCPU").is_err());
        assert!(resources("VCPU:x").is_err());
        assert!(resources("VCPU:0").is_err());
        assert!(resources("VCPU:-1").is_err());
    }

    #[test]
    fn trait_grammar() {
        let q = trait_value("A,!B", true, false).unwrap();
        assert_eq!(q.required, vec![vec!["A".to_string()]]);
        assert_eq!(q.forbidden, vec!["B".to_string()]);
        assert!(trait_value("A,!B", false, false).is_err());
        assert!(trait_value("in:A,B", true, false).is_err());
        assert_eq!(
            trait_value("in:B,A", true, true).unwrap().required,
            vec![vec!["A".to_string(), "B".to_string()]]
        );
        assert!(trait_value("A,,B", true, true).is_err());
        assert_eq!(
            trait_value("!!!A", true, true).unwrap().forbidden,
            vec!["A".to_string()]
        );
    }
}
