//! `include/shim.h` must be what cbindgen generates from the current sources.
//! Regenerate with `scripts/tools/gen-header` (or `UPDATE_HEADER=1 cargo test --test header`).

#[test]
fn c_header_is_current() {
    let dir = env!("CARGO_MANIFEST_DIR");
    let config =
        cbindgen::Config::from_file(format!("{dir}/cbindgen.toml")).expect("cbindgen.toml");
    let mut out = Vec::new();
    cbindgen::Builder::new()
        .with_crate(dir)
        .with_config(config)
        .generate()
        .expect("cbindgen generates the header")
        .write(&mut out);
    let fresh = String::from_utf8(out).unwrap();
    let path = format!("{dir}/include/shim.h");
    if std::env::var_os("UPDATE_HEADER").is_some() {
        std::fs::write(&path, &fresh).unwrap();
        return;
    }
    let current = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        current == fresh,
        "include/shim.h is stale: run scripts/tools/gen-header and commit the result.\n--- generated ---\n{fresh}"
    );
}
