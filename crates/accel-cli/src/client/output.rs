//! Printing results: OpenStack-client-like tables (a row per object for lists, a
//! Field/Value table for one object) or JSON with the same columns.

use super::Format;
use serde_json::{Map, Value};

/// A table cell: strings bare, `null` as `None` (as the OpenStack client prints it),
/// anything else as compact JSON.
fn cell(v: Option<&Value>) -> String {
    match v {
        None | Some(Value::Null) => "None".to_owned(),
        Some(Value::String(s)) => s.clone(),
        Some(other) => other.to_string(),
    }
}

/// Upstream answers a create with ISO 8601 times (`2020-03-09T11:26:05+00:00`) and a
/// show with a space for the `T`; printed, both read the ISO way.
fn timestamp(column: &str, v: Value) -> Value {
    match v {
        Value::String(s)
            if column.ends_with("_at")
                && s.len() > 10
                && s.as_bytes()[10] == b' '
                && s[..10].bytes().all(|b| b.is_ascii_digit() || b == b'-') =>
        {
            Value::String(format!("{}T{}", &s[..10], &s[11..]))
        }
        v => v,
    }
}

fn pick(obj: &Value, columns: &[&str]) -> Value {
    let mut m = Map::new();
    for c in columns {
        let v = obj.get(*c).cloned().unwrap_or(Value::Null);
        m.insert((*c).to_owned(), timestamp(c, v));
    }
    Value::Object(m)
}

fn render_table(header: &[String], rows: &[Vec<String>]) -> String {
    let mut widths: Vec<usize> = header.iter().map(|h| h.chars().count()).collect();
    for row in rows {
        for (w, c) in widths.iter_mut().zip(row) {
            *w = (*w).max(c.chars().count());
        }
    }
    let rule = {
        let mut s = String::from("+");
        for w in &widths {
            s.push_str(&"-".repeat(w + 2));
            s.push('+');
        }
        s
    };
    let line = |cells: &[String]| {
        let mut s = String::from("|");
        for (c, w) in cells.iter().zip(&widths) {
            let pad = w - c.chars().count();
            s.push(' ');
            s.push_str(c);
            s.push_str(&" ".repeat(pad + 1));
            s.push('|');
        }
        s
    };
    let mut out = vec![rule.clone(), line(header), rule.clone()];
    out.extend(rows.iter().map(|r| line(r)));
    out.push(rule);
    out.join("\n")
}

/// A list of objects, one row each with `columns`.
pub fn list(format: Format, items: &[Value], columns: &[&str]) -> String {
    match format {
        Format::Json => {
            let picked: Vec<Value> = items.iter().map(|i| pick(i, columns)).collect();
            serde_json::to_string_pretty(&picked).unwrap_or_default()
        }
        Format::Table => {
            let header: Vec<String> = columns.iter().map(|c| (*c).to_owned()).collect();
            let rows: Vec<Vec<String>> = items
                .iter()
                .map(|i| {
                    columns
                        .iter()
                        .map(|c| {
                            cell(Some(&timestamp(
                                c,
                                i.get(*c).cloned().unwrap_or(Value::Null),
                            )))
                        })
                        .collect()
                })
                .collect();
            render_table(&header, &rows)
        }
    }
}

/// One object as a Field/Value table, or a JSON object with `fields`.
pub fn show(format: Format, obj: &Value, fields: &[&str]) -> String {
    match format {
        Format::Json => serde_json::to_string_pretty(&pick(obj, fields)).unwrap_or_default(),
        Format::Table => {
            let rows: Vec<Vec<String>> = fields
                .iter()
                .map(|f| {
                    let v = timestamp(f, obj.get(*f).cloned().unwrap_or(Value::Null));
                    vec![(*f).to_owned(), cell(Some(&v))]
                })
                .collect();
            render_table(&["Field".to_owned(), "Value".to_owned()], &rows)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn times_print_the_same_from_create_and_show() {
        let created = json!({"created_at": "2026-11-24T05:08:10+00:00", "name": "a b"});
        let shown = json!({"created_at": "2026-11-24 05:08:10+00:00", "name": "a b"});
        for f in [Format::Table, Format::Json] {
            assert_eq!(
                show(f, &created, &["created_at", "name"]),
                show(f, &shown, &["created_at", "name"])
            );
        }
        assert!(show(Format::Table, &shown, &["name"]).contains("a b"));
    }

    #[test]
    fn tables_as_the_openstack_client_draws_them() {
        let items = [
            json!({"uuid": "u1", "name": "dp", "groups": [{"resources:FPGA": "1"}], "extra": 1}),
            json!({"uuid": "u2", "name": "longer-name", "groups": null}),
        ];
        let t = list(Format::Table, &items, &["uuid", "name", "groups"]);
        assert_eq!(
            t,
            concat!(
                "+------+-------------+--------------------------+\n",
                "| uuid | name        | groups                   |\n",
                "+------+-------------+--------------------------+\n",
                "| u1   | dp          | [{\"resources:FPGA\":\"1\"}] |\n",
                "| u2   | longer-name | None                     |\n",
                "+------+-------------+--------------------------+",
            )
        );
        let j: Value =
            serde_json::from_str(&list(Format::Json, &items, &["uuid", "name"])).unwrap();
        assert_eq!(
            j,
            json!([{"uuid": "u1", "name": "dp"}, {"uuid": "u2", "name": "longer-name"}])
        );
        let s = show(Format::Table, &items[0], &["uuid", "name"]);
        assert_eq!(
            s,
            "+-------+-------+\n| Field | Value |\n+-------+-------+\n| uuid  | u1    |\n| name  | dp    |\n+-------+-------+"
        );
    }
}
