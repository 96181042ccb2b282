#[tokio::main]
async fn main() -> std::process::ExitCode {
    let (config, listener) = service_kit::start::<queue_manager::Flags>().await;
    service_kit::exit(queue_manager::run_on(config, listener, service_kit::shutdown_signal()).await)
}
