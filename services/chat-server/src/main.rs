#[tokio::main]
async fn main() -> std::process::ExitCode {
    let (config, listener) = service_kit::start::<chat_server::Config>().await;
    service_kit::exit(chat_server::serve(listener, config, service_kit::shutdown_signal()).await)
}
