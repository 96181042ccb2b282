# valkey-server 8 with the valkey-queue module loaded, AOF on. Module arguments go in
# QUEUE_MODULE_ARGS (e.g. "default-soft-cap 500"); extra server arguments after the
# image name (`docker run ... valkey-queue/valkey --maxmemory 2gb`).
ARG BASE=valkey/valkey:8.0-bookworm
FROM ${BASE}
RUN (getent group valkey >/dev/null || groupadd --system --gid 999 valkey) \
 && (getent passwd valkey >/dev/null || useradd --system --uid 999 --gid valkey --no-create-home --shell /usr/sbin/nologin valkey) \
 && mkdir -p /data /usr/lib/valkey-queue && chown valkey:valkey /data
COPY libvalkey_queue.so /usr/lib/valkey-queue/libvalkey_queue.so
COPY valkey-entrypoint.sh /usr/local/bin/valkey-queue-entrypoint
ENV QUEUE_MODULE_ARGS="" \
    VALKEY_PORT=6379
WORKDIR /data
VOLUME /data
USER valkey
EXPOSE 6379
HEALTHCHECK --interval=10s --timeout=3s --start-period=5s --retries=3 \
  CMD ["bash", "-c", "exec 3<>/dev/tcp/127.0.0.1/${VALKEY_PORT} && printf 'PING\\r\\n' >&3 && head -c5 <&3 | grep -q PONG"]
# valkey-server saves nothing more on SIGTERM than AOF already holds, and exits.
STOPSIGNAL SIGTERM
ENTRYPOINT ["/usr/local/bin/valkey-queue-entrypoint"]
