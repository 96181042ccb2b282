// jemalloc: a fan-out to every socket takes half the time it takes with the system
// allocator, at the same memory per session (bench/README.md, "Which allocator").
#[global_allocator]
static ALLOC: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

#[tokio::main]
async fn main() -> std::process::ExitCode {
    let (config, listener) = service_kit::start::<chat_server::Config>().await;
    service_kit::exit(chat_server::serve(listener, config, service_kit::shutdown_signal()).await)
}
