//! Packages as `cargo metadata` describes them, for the tests of the
//! generators that read it: only the fields a test names, the rest filled in
//! with what cargo reports for a bare package.

use cargo_metadata::Package;
use serde_json::{json, Value};

/// A package with the fields of `fields` (a JSON object: `name` at least),
/// the others as cargo reports them for a bare manifest.
pub fn package(fields: Value) -> Package {
    let name = fields["name"].as_str().expect("a package has a name");
    let mut p = json!({
        "version": "0.1.0",
        "id": format!("path+file:///w/{name}#0.1.0"),
        "dependencies": [],
        "targets": [],
        "features": {},
        "manifest_path": format!("/w/{name}/Cargo.toml"),
    });
    for (k, v) in fields.as_object().expect("the fields are an object") {
        p[k] = v.clone();
    }
    serde_json::from_value(p).expect("a package as cargo metadata describes one")
}

/// A dependency on `name` of `kind` (`None`: normal, else `dev` or `build`),
/// `optional` or not, as a package's `dependencies` list it.
pub fn dep(name: &str, kind: Option<&str>, optional: bool) -> Value {
    json!({"name": name, "req": "*", "kind": kind, "optional": optional,
           "uses_default_features": true, "features": []})
}
