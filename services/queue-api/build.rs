//! Builds the table of the waiting room's languages from `static/i18n/*.json`, so that
//! adding a language is adding its messages file.

use std::fmt::Write;
use std::path::PathBuf;

fn main() {
    let dir = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").expect("set by cargo")).join("static/i18n");
    println!("cargo:rerun-if-changed={}", dir.display());
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.expect("a directory entry").path())
        .filter(|p| p.extension().is_some_and(|x| x == "json"))
        .collect();
    files.sort();
    let mut table =
        String::from("/// Each language's tag and messages file, by tag.\npub static FILES: &[(&str, &str)] = &[\n");
    for f in &files {
        let tag = f.file_stem().and_then(|s| s.to_str()).expect("a UTF-8 file name");
        writeln!(table, "    ({tag:?}, include_str!({:?})),", f.display().to_string()).unwrap();
    }
    table.push_str("];\n");
    let out = PathBuf::from(std::env::var("OUT_DIR").expect("set by cargo")).join("languages.rs");
    std::fs::write(out, table).expect("write the language table");
}
