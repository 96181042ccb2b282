//! `cargo xtask gen-lua [--check]`: writes the constants block of
//! `lua-fallback/queue.lua` from queue-core (limits, key names, settings schema,
//! error texts, counters). With `--check`, changes nothing and fails when the
//! checked-in library differs from what would be generated.

use std::path::PathBuf;
use std::process::ExitCode;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.iter().map(String::as_str).collect::<Vec<_>>()[..] {
        ["gen-lua"] => gen_lua(false),
        ["gen-lua", "--check"] => gen_lua(true),
        _ => {
            eprintln!("usage: cargo xtask gen-lua [--check]");
            ExitCode::from(2)
        }
    }
}

fn gen_lua(check: bool) -> ExitCode {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../lua-fallback/queue.lua");
    let source = match std::fs::read_to_string(&path) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("{}: {e}", path.display());
            return ExitCode::FAILURE;
        }
    };
    let Some(generated) = queue_core::lua::replace_block(&source, &queue_core::lua::constants_block()) else {
        eprintln!("{}: no `{}` ... `{}` block", path.display(), queue_core::lua::BEGIN, queue_core::lua::END);
        return ExitCode::FAILURE;
    };
    if generated == source {
        println!("lua-fallback/queue.lua is up to date");
        return ExitCode::SUCCESS;
    }
    if check {
        eprintln!("lua-fallback/queue.lua differs from what queue-core generates: run `cargo xtask gen-lua`");
        return ExitCode::FAILURE;
    }
    if let Err(e) = std::fs::write(&path, generated) {
        eprintln!("{}: {e}", path.display());
        return ExitCode::FAILURE;
    }
    println!("wrote lua-fallback/queue.lua");
    ExitCode::SUCCESS
}
