# One of the three services (queue-api, queue-manager, chat-server), from a binary
# built beforehand (`bash docker/build-images.sh` stages it in the build context).
#
#   docker build -f docker/service.Dockerfile --build-arg SERVICE=queue-api \
#     --build-arg PORT=8080 -t valkey-queue/queue-api <context holding queue-api>
ARG BASE=debian:bookworm-slim
FROM ${BASE}
ARG SERVICE
ARG PORT
RUN (getent group app >/dev/null || groupadd --system --gid 10001 app) \
 && (getent passwd app >/dev/null || useradd --system --uid 10001 --gid app --no-create-home --shell /usr/sbin/nologin app)
COPY ${SERVICE} /usr/local/bin/service
ENV LISTEN=0.0.0.0:${PORT} \
    LOG_FORMAT=json \
    OTEL_SERVICE_NAME=${SERVICE} \
    HEALTH_PORT=${PORT}
USER app
EXPOSE ${PORT}
# Liveness over /healthz with bash alone (the slim base has no curl).
HEALTHCHECK --interval=10s --timeout=3s --start-period=10s --retries=3 \
  CMD ["bash", "-c", "exec 3<>/dev/tcp/127.0.0.1/${HEALTH_PORT} && printf 'GET /healthz HTTP/1.0\\r\\n\\r\\n' >&3 && head -n1 <&3 | grep -q ' 200 '"]
# SIGTERM: the service stops taking requests, finishes those in flight, ends its
# sessions or gives up its lease, and exits 0.
STOPSIGNAL SIGTERM
ENTRYPOINT ["/usr/local/bin/service"]
