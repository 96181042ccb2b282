#[tokio::main]
async fn main() -> std::process::ExitCode {
    let (config, listener) = service_kit::start::<queue_manager::Flags>().await;
    service_kit::exit(queue_manager::serve(listener, config, service_kit::shutdown_signal()).await)
}
