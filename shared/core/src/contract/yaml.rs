//! A small YAML emitter for JSON values (block style; strings always double-quoted with JSON escapes,
//! which YAML reads as the same strings), so `asyncapi.yaml` needs no YAML library.

use serde_json::Value;

/// `value` as a YAML document.
pub fn to_yaml(value: &Value) -> String {
    let mut out = String::new();
    block(value, 0, &mut out);
    out
}

fn scalar(value: &Value) -> String {
    match value {
        Value::String(text) => serde_json::to_string(text).unwrap_or_default(),
        Value::Array(items) if items.is_empty() => "[]".into(),
        Value::Object(map) if map.is_empty() => "{}".into(),
        other => other.to_string(),
    }
}

fn is_block(value: &Value) -> bool {
    matches!(value, Value::Array(items) if !items.is_empty())
        || matches!(value, Value::Object(map) if !map.is_empty())
}

fn key(text: &str) -> String {
    let plain = !text.is_empty()
        && text.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.' | '$'))
        && !text.starts_with(['-', '.']);
    if plain {
        text.to_owned()
    } else {
        serde_json::to_string(text).unwrap_or_default()
    }
}

fn block(value: &Value, indent: usize, out: &mut String) {
    let pad = " ".repeat(indent);
    match value {
        Value::Object(map) if !map.is_empty() => {
            for (name, item) in map {
                if is_block(item) {
                    out.push_str(&format!("{pad}{}:\n", key(name)));
                    block(item, indent + 2, out);
                } else {
                    out.push_str(&format!("{pad}{}: {}\n", key(name), scalar(item)));
                }
            }
        }
        Value::Array(items) if !items.is_empty() => {
            for item in items {
                if is_block(item) {
                    // The first line of the item goes after the dash, the rest indented under it.
                    let mut inner = String::new();
                    block(item, indent + 2, &mut inner);
                    let trimmed = inner.trim_start_matches(' ');
                    out.push_str(&format!("{pad}- {trimmed}"));
                } else {
                    out.push_str(&format!("{pad}- {}\n", scalar(item)));
                }
            }
        }
        other => out.push_str(&format!("{pad}{}\n", scalar(other))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn emits_block_yaml_with_quoted_strings() {
        let yaml = to_yaml(&json!({
            "asyncapi": "3.0.0",
            "list": [{"a": 1, "b": "x"}, "y"],
            "$ref": "#/c",
            "empty": {},
            "odd key": "a \"quote\"",
        }));
        assert!(yaml.contains("asyncapi: \"3.0.0\"\n"));
        assert!(yaml.contains("list:\n  - a: 1\n    b: \"x\"\n  - \"y\"\n"));
        assert!(yaml.contains("$ref: \"#/c\"\n"));
        assert!(yaml.contains("empty: {}\n"));
        assert!(yaml.contains("\"odd key\": \"a \\\"quote\\\"\"\n"));
    }
}
