#[global_allocator]
static ALLOC: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[tokio::main]
async fn main() -> std::process::ExitCode {
    let (config, listener) = service_kit::start::<queue_api::Config>().await;
    service_kit::exit(queue_api::serve(listener, config, service_kit::shutdown_signal()).await)
}
