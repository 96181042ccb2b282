// jemalloc: faster than the system allocator on the request path and smaller per
// open stream (bench/README.md, "Which allocator").
#[global_allocator]
static ALLOC: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

#[tokio::main]
async fn main() -> std::process::ExitCode {
    let (config, listener) = service_kit::start::<queue_api::Config>().await;
    service_kit::exit(queue_api::serve(listener, config, service_kit::shutdown_signal()).await)
}
