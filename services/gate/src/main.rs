#[global_allocator]
static ALLOC: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

#[tokio::main]
async fn main() -> std::process::ExitCode {
    let (config, listener) = service_kit::start::<queue_gate::Flags>().await;
    service_kit::exit(queue_gate::serve(listener, config, service_kit::shutdown_signal()).await)
}
