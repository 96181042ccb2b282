use clap::Parser;

/// chat-server: the WebSocket chat room behind the waiting room.
#[derive(Parser)]
#[command(version, about)]
struct Cli {
    #[command(flatten)]
    config: chat_server::Config,
}

#[tokio::main]
async fn main() -> std::io::Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()))
        .init();
    let config = Cli::parse().config;
    let listener = tokio::net::TcpListener::bind(config.listen).await?;
    tracing::info!(listen = %listener.local_addr()?, valkey = %config.valkey_url, "chat-server listening");
    chat_server::serve(listener, config, shutdown_signal()).await
}

/// SIGTERM or SIGINT.
async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    let term = async {
        if let Ok(mut s) = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            s.recv().await;
        }
    };
    tokio::select! {
        _ = ctrl_c => {}
        _ = term => {}
    }
    tracing::info!("shutting down: closing sockets and ending sessions");
}
