//! Tracing to stdout: the level from `RUST_LOG` (default `info`), ANSI colours only
//! when stdout is a terminal, lines as text or as JSON objects.

use std::io::IsTerminal;
use tracing_subscriber::EnvFilter;

/// How log lines look (`--log-format`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    /// Human-readable lines.
    Text,
    /// One JSON object a line, for log collectors.
    Json,
}

/// Installs the process's subscriber (once; later calls change nothing).
pub fn init(format: LogFormat) {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt().with_env_filter(filter).with_ansi(std::io::stdout().is_terminal());
    let _ = match format {
        LogFormat::Text => builder.try_init(),
        LogFormat::Json => builder.json().try_init(),
    };
}
