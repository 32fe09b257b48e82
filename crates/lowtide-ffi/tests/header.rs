//! The committed header is what cbindgen generates from the source: a change to the C API
//! that forgot the header fails here. `LOWTIDE_BLESS=1` rewrites it.

use std::path::Path;

#[test]
fn committed_header_matches_cbindgen() {
    let crate_dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    let config = cbindgen::Config::from_file(crate_dir.join("cbindgen.toml")).unwrap();
    let mut generated = Vec::new();
    cbindgen::Builder::new()
        .with_crate(crate_dir)
        .with_config(config)
        .generate()
        .expect("cbindgen parses the crate")
        .write(&mut generated);
    let generated = String::from_utf8(generated).unwrap();
    let path = crate_dir.join("include/lowtide.h");
    if std::env::var_os("LOWTIDE_BLESS").is_some() {
        std::fs::write(&path, &generated).unwrap();
    }
    let committed = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        committed == generated,
        "{} differs from cbindgen's output: run \
         `LOWTIDE_BLESS=1 cargo test -p lowtide-ffi --test header` and commit the header",
        path.display()
    );
}
