"""Plays kubelet for a rendered overlay, with docker: every Deployment and StatefulSet
started as its pod spec says, probed as kubelet probes, a swarm sent through them, and
each stopped as kubelet stops a pod. Called by `k8s.py play OVERLAY`.

What a pod spec says, and what becomes of it here:
- image: the local tag docker/ci.sh builds (valkey-queue/queue-api:0.1.0 ->
  valkey-queue-ci/queue-api:test); command/args: --entrypoint and the arguments, with
  $(VAR) expanded as kubelet does; env: values, ConfigMap and Secret keys, fieldRef.
- securityContext: --user runAsUser:runAsGroup (+ fsGroup as a supplementary group),
  --read-only for readOnlyRootFilesystem, --cap-drop ALL, no-new-privileges for
  allowPrivilegeEscalation: false, docker's default seccomp profile for RuntimeDefault;
  runAsNonRoot is checked against the image's user.
- resources.limits: --memory and --cpus (the cgroup limits kubelet sets).
- volumes: Secret and ConfigMap files (defaultMode, group fsGroup) and the
  PersistentVolumeClaim as a directory of the fsGroup, bind-mounted.
- replicas: that many containers; a Service in front of several is a round-robin TCP
  proxy on loopback (what kube-proxy does).
- A pod has its own network namespace; here every container shares the host's
  (loopback only), so each containerPort gets a free loopback port: the env values
  that name a containerPort (0.0.0.0:8080, VALKEY_PORT=6379) and the Service
  addresses in URLs (valkey:6379) are rewritten to it, and Service names resolve to
  127.0.0.1 (--add-host). Nothing else is changed.
- Probes: startupProbe, then readinessProbe until ready, livenessProbe all along
  (initialDelaySeconds, periodSeconds, timeoutSeconds, failureThreshold,
  successThreshold; httpGet 200-399, tcpSocket, exec).
- Stop: the preStop hook (sleep, exec or httpGet), then SIGTERM with the rest of
  terminationGracePeriodSeconds (docker stop -t); the container must exit 0 within it.
"""
import asyncio
import base64
import json
import math
import os
import re
import secrets as pysecrets
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
DOCKER = os.environ.get("DOCKER", "docker")


def log(msg):
    print(f"[play {time.strftime('%H:%M:%S')}] {msg}", flush=True)


class Failure(Exception):
    pass


_taken = set()


def free_port():
    """A loopback port free now, below the kernel's ephemeral range: a container binds
    it a moment later, and a port the kernel hands out meanwhile (to a proxy here, an
    outgoing connection, another test on the machine) must not be it."""
    import random
    with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
        low = int(f.read().split()[0])
    while True:
        port = random.randrange(max(1024, low - 12000), low)
        if port in _taken:
            continue
        s = socket.socket()
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            continue
        finally:
            s.close()
        _taken.add(port)
        return port


def enter(port, nickname, queue, client_ip):
    """POST /api/queue/entry to the queue-api on `port`, as a person at `client_ip`:
    the standing it answers."""
    req = urllib.request.Request(
        f"http://127.0.0.1:{port}/api/queue/entry", method="POST",
        data=json.dumps({"nickname": nickname, "queue": queue}).encode(),
        headers={"Content-Type": "application/json", "X-Forwarded-For": client_ip})
    with urllib.request.urlopen(req, timeout=10) as resp:
        return json.loads(resp.read())


def held_open(port, status, what, request):
    """A connection to `port` that sent `request` and was answered `status`, kept open."""
    sock = socket.create_connection(("127.0.0.1", port), timeout=10)
    sock.sendall(request.encode())
    head = sock.recv(4096)
    if f" {status} ".encode() not in head.split(b"\r\n", 1)[0]:
        raise Failure(f"{what} refused: {head[:200]!r}")
    return sock


def docker(*args, check=True, capture=True, timeout=None):
    out = subprocess.run([DOCKER, *args], capture_output=capture, text=True, timeout=timeout)
    if check and out.returncode != 0:
        raise Failure(f"docker {' '.join(args[:3])}...: {out.stderr.strip()}")
    return out


# ---------------------------------------------------------------- kubelet's $(VAR)

def expand(text, env):
    """Kubernetes' $(VAR) expansion: defined names are replaced, $$ is a literal $,
    anything else stays as written."""
    def sub(m):
        if m.group(0) == "$$":
            return "$"
        name = m.group(1)
        return env[name] if name in env else m.group(0)
    return re.sub(r"\$\$|\$\(([A-Za-z_][A-Za-z0-9_.-]*)\)", sub, text)


# ---------------------------------------------------------------- Service proxy

class RoundRobin:
    """A Service with several ready pods: each new connection to the next pod."""

    def __init__(self, name, backends):
        self.name = name
        self.backends = backends
        self.port = free_port()
        self.next = 0
        self.loop = asyncio.new_event_loop()
        self.ready = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()
        self.ready.wait(5)

    def _run(self):
        asyncio.set_event_loop(self.loop)
        self.server = self.loop.run_until_complete(asyncio.start_server(self._handle, "127.0.0.1", self.port))
        self.ready.set()
        self.loop.run_forever()

    async def _handle(self, reader, writer):
        port = self.backends[self.next % len(self.backends)]
        self.next += 1
        try:
            up_r, up_w = await asyncio.open_connection("127.0.0.1", port)
        except OSError:
            writer.close()
            return

        async def pipe(r, w):
            try:
                while True:
                    data = await r.read(65536)
                    if not data:
                        break
                    w.write(data)
                    await w.drain()
            except (OSError, asyncio.CancelledError):
                pass
            finally:
                try:
                    w.close()
                except OSError:
                    pass
        await asyncio.gather(pipe(reader, up_w), pipe(up_r, writer))

    def stop(self):
        def shut():
            self.server.close()
            self.loop.stop()
        self.loop.call_soon_threadsafe(shut)
        self.thread.join(5)


class EchoApp:
    """The app behind the gate (GATE_UPSTREAM), as the swarm's gate walk expects it:
    200 with whom it served, from the X-Queue-User header the gate passes on."""

    def __init__(self):
        import http.server

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self):
                body = json.dumps({"user": self.headers.get("X-Queue-User", ""), "path": self.path}).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args):
                pass
        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def stop(self):
        self.server.shutdown()
        self.server.server_close()


# ---------------------------------------------------------------- probes

def probe_once(probe, ports, container_name):
    timeout = probe.get("timeoutSeconds", 1)
    if "httpGet" in probe:
        h = probe["httpGet"]
        port = ports[h["port"]] if isinstance(h["port"], str) else ports[h["port"]]
        scheme = h.get("scheme", "HTTP").lower()
        req = urllib.request.Request(f"{scheme}://127.0.0.1:{port}{h.get('path', '/')}")
        for hdr in h.get("httpHeaders", []):
            req.add_header(hdr["name"], hdr["value"])
        try:
            with urllib.request.urlopen(req, timeout=timeout) as resp:
                return 200 <= resp.status < 400
        except urllib.error.HTTPError as e:
            return 200 <= e.code < 400
        except OSError:
            return False
    if "tcpSocket" in probe:
        port = ports[probe["tcpSocket"]["port"]]
        try:
            socket.create_connection(("127.0.0.1", port), timeout=timeout).close()
            return True
        except OSError:
            return False
    if "exec" in probe:
        try:
            out = subprocess.run([DOCKER, "exec", container_name, *probe["exec"]["command"]],
                                 capture_output=True, timeout=timeout + 1)
            return out.returncode == 0
        except subprocess.TimeoutExpired:
            return False
    raise Failure(f"probe kind not played here: {sorted(probe)}")


class Pod:
    def __init__(self, overlay, workload, index, container, docker_name, ports, grace):
        self.overlay = overlay
        self.workload = workload
        self.index = index
        self.spec = container
        self.name = docker_name
        self.ports = ports
        self.grace = grace
        self.started_at = None
        self.ready_at = None
        self.failure = None
        self.liveness = {"probes": 0, "failed": 0}
        self.readiness = {"probes": 0, "failed": 0}
        self.stopping = threading.Event()

    def label(self):
        return f"{self.workload['kind']}/{self.workload['metadata']['name']}#{self.index}"

    def running(self):
        out = docker("inspect", "-f", "{{.State.Running}} {{.State.ExitCode}}", self.name, check=False)
        return out.stdout.strip().startswith("true")

    def _phase(self, probe, what, until_success):
        """Runs `probe` as kubelet does. until_success: return once it passes
        (successThreshold in a row); else run until stopped, failing the pod on
        failureThreshold failures in a row."""
        time.sleep(probe.get("initialDelaySeconds", 0))
        period = probe.get("periodSeconds", 10)
        fails = succ = 0
        need_fail = probe.get("failureThreshold", 3)
        need_succ = probe.get("successThreshold", 1)
        while not self.stopping.is_set():
            if not self.running():
                raise Failure(f"{self.label()}: container exited during its {what} probe")
            ok = probe_once(probe, self.ports, self.name)
            if self.stopping.is_set():
                return
            stats = self.liveness if what == "liveness" else self.readiness if what == "readiness" else None
            if stats is not None:
                stats["probes"] += 1
                stats["failed"] += 0 if ok else 1
            if ok:
                succ += 1
                fails = 0
                if until_success and succ >= need_succ:
                    return
            else:
                succ = 0
                fails += 1
                if fails >= need_fail:
                    if what == "readiness" and not until_success:
                        # Unready, not restarted: kubelet takes it out of the endpoints.
                        log(f"{self.label()}: readiness failed {fails} times in a row (unready)")
                        fails = 0
                    else:
                        raise Failure(f"{self.label()}: {what} probe failed {fails} times in a row "
                                      f"(kubelet would {'restart' if what != 'readiness' else 'never ready'} it)")
            self.stopping.wait(period)

    def run_probes(self):
        try:
            c = self.spec
            if "startupProbe" in c:
                self._phase(c["startupProbe"], "startup", True)
            threads = []
            if "livenessProbe" in c:
                t = threading.Thread(target=self._guard, args=(c["livenessProbe"], "liveness"), daemon=True)
                t.start()
                threads.append(t)
            if "readinessProbe" in c:
                self._phase(c["readinessProbe"], "readiness", True)
            self.ready_at = time.monotonic()
            if "readinessProbe" in c:
                t = threading.Thread(target=self._guard, args=(c["readinessProbe"], "readiness"), daemon=True)
                t.start()
        except Failure as e:
            self.failure = str(e)

    def _guard(self, probe, what):
        try:
            # Liveness starts with the container's startup done; readiness goes on.
            self._phase({**probe, "initialDelaySeconds": 0}, what, False)
        except Failure as e:
            if not self.stopping.is_set():
                self.failure = str(e)

    def stop(self):
        """preStop, then SIGTERM with what is left of the grace period."""
        t0 = time.monotonic()
        # Terminating: a probe failing from here on restarts nothing (the container
        # is on its way out), so probing stops.
        self.stopping.set()
        pre = self.spec.get("lifecycle", {}).get("preStop")
        if pre:
            if "sleep" in pre:
                time.sleep(pre["sleep"]["seconds"])
            elif "exec" in pre:
                docker("exec", self.name, *pre["exec"]["command"], check=False, timeout=self.grace)
            elif "httpGet" in pre:
                probe_once({"httpGet": pre["httpGet"], "timeoutSeconds": self.grace}, self.ports, self.name)
        left = self.grace - (time.monotonic() - t0)
        docker("stop", "-t", str(max(0, math.floor(left))), self.name, check=False, timeout=self.grace + 30)
        took = time.monotonic() - t0
        code = docker("inspect", "-f", "{{.State.ExitCode}}", self.name).stdout.strip()
        return took, int(code)


# ---------------------------------------------------------------- the play

class Play:
    def __init__(self, overlay, docs, local_image, options):
        self.overlay = overlay
        self.docs = docs
        self.local = local_image
        self.users = options.get("users", 300)
        self.tmp = tempfile.mkdtemp(prefix=f"kubelet-{overlay}-")
        self.tag = f"vqk-{os.getpid()}"
        self.pods = []
        self.proxies = []
        self.children = []
        self.configmaps = {d["metadata"]["name"]: dict(d.get("data", {})) for d in docs if d["kind"] == "ConfigMap"}
        self.secrets = {
            d["metadata"]["name"]: {k: base64.b64decode(v).decode() for k, v in d.get("data", {}).items()}
            for d in docs if d["kind"] == "Secret"
        }
        for d in docs:
            if d["kind"] == "Secret":
                self.secrets[d["metadata"]["name"]].update(d.get("stringData", {}))
        self.workloads = [d for d in docs if d["kind"] in ("StatefulSet", "Deployment")]
        # A Deployment an HPA owns has no replicas of its own: the HPA's minimum.
        for h in (d for d in docs if d["kind"] == "HorizontalPodAutoscaler"):
            for w in self.workloads:
                if w["kind"] == h["spec"]["scaleTargetRef"]["kind"] and \
                        w["metadata"]["name"] == h["spec"]["scaleTargetRef"]["name"]:
                    w["spec"].setdefault("replicas", h["spec"].get("minReplicas", 1))
        self.services = [d for d in docs if d["kind"] == "Service"]
        self.admin_url = None  # a Valkey URL with every right, to count what is left

    # -- Secrets a deployer fills in -------------------------------------------------

    def secret_named(self, prefix):
        names = [n for n in self.secrets if n == prefix or re.fullmatch(re.escape(prefix) + r"-[a-z0-9]{10}", n)]
        if len(names) != 1:
            raise Failure(f"no single Secret {prefix} in the overlay ({sorted(self.secrets)})")
        return names[0]

    def managed_valkey(self):
        """The managed overlay's Valkey: a plain valkey-server (no module), TLS only, its
        certificate from a private CA made here, and exactly the ACL users of
        overlays/managed-valkey/valkey-users.acl (fresh passwords). Fills in the two
        Secrets as a deployer would: the URLs (passwords, port) and the CA."""
        creds = self.secret_named("valkey-credentials")
        hosts = {re.match(r"rediss://[^@]*@([^:/]+)", u).group(1) for u in self.secrets[creds].values()}
        if len(hosts) != 1:
            raise Failure(f"the managed overlay's URLs name several hosts: {hosts}")
        host = hosts.pop()
        d = os.path.join(self.tmp, "valkey")
        os.makedirs(d)
        with open(os.path.join(d, "server.ext"), "w") as f:
            f.write(f"subjectAltName=DNS:{host},IP:127.0.0.1\nextendedKeyUsage=serverAuth\n")

        def openssl(*args):
            out = subprocess.run(["openssl", *args], cwd=d, capture_output=True, text=True)
            if out.returncode != 0:
                raise Failure(f"openssl {args[0]}: {out.stderr.strip()}")
        openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "ca.key", "-out", "ca.crt",
                "-days", "2", "-subj", "/CN=managed valkey test CA")
        openssl("req", "-newkey", "rsa:2048", "-nodes", "-keyout", "server.key", "-out", "server.csr",
                "-subj", f"/CN={host}")
        openssl("x509", "-req", "-in", "server.csr", "-CA", "ca.crt", "-CAkey", "ca.key", "-CAcreateserial",
                "-days", "2", "-sha256", "-extfile", "server.ext", "-out", "server.crt")
        # The users exactly as the overlay says, passwords replaced.
        with open(os.path.join(HERE, "overlays", "managed-valkey", "valkey-users.acl")) as f:
            acl = f.read()
        passwords = {}
        for placeholder in sorted(set(re.findall(r"change-me-[a-z-]+", acl))):
            passwords[placeholder] = pysecrets.token_hex(16)
        for old, new in passwords.items():
            acl = acl.replace(old, new)
        admin_pw = pysecrets.token_hex(16)
        acl += f"user default off resetpass -@all\nuser check-admin on >{admin_pw} ~* &* +@all\n"
        with open(os.path.join(d, "users.acl"), "w") as f:
            f.write(acl)
        port = free_port()
        logf = open(os.path.join(d, "valkey.log"), "w")
        proc = subprocess.Popen(
            ["valkey-server", "--port", "0", "--tls-port", str(port), "--bind", "127.0.0.1",
             "--tls-cert-file", "server.crt", "--tls-key-file", "server.key", "--tls-ca-cert-file", "ca.crt",
             "--tls-auth-clients", "no", "--aclfile", os.path.join(d, "users.acl"), "--dir", d,
             "--save", "", "--appendonly", "no", "--maxmemory-policy", "noeviction"],
            cwd=d, stdout=logf, stderr=subprocess.STDOUT)
        self.children.append(proc)
        for _ in range(100):
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                break
            except OSError:
                time.sleep(0.1)
        else:
            raise Failure("the managed-style valkey-server did not start")
        log(f"managed Valkey: valkey-server {host} (127.0.0.1:{port}), TLS only, no module, "
            f"users of valkey-users.acl")
        for key, url in self.secrets[creds].items():
            for old, new in passwords.items():
                url = url.replace(f":{old}@", f":{new}@")
            self.secrets[creds][key] = re.sub(rf"@{re.escape(host)}:\d+", f"@{host}:{port}", url)
        ca = self.secret_named("valkey-ca")
        with open(os.path.join(d, "ca.crt")) as f:
            self.secrets[ca]["ca.crt"] = f.read()
        self.extra_hosts = {host}
        self.admin_cli = ["valkey-cli", "--tls", "--cacert", os.path.join(d, "ca.crt"), "-h", "127.0.0.1",
                          "-p", str(port), "--user", "check-admin", "--pass", admin_pw, "--no-auth-warning"]

    def gate_upstream(self):
        """The app the gate's settings name (outside this namespace): an echo app on
        loopback under that name and port."""
        self.app = None
        settings = [d for n, d in self.configmaps.items() if re.fullmatch(r"queue-gate-settings(-[a-z0-9]{10})?", n)]
        upstream = settings[0].get("GATE_UPSTREAM", "") if settings else ""
        m = re.fullmatch(r"http://([^:/]+):(\d+)/?", upstream)
        if not m:
            return
        self.app = EchoApp()
        self.service_ports[(m.group(1), int(m.group(2)))] = self.app.port
        self.extra_hosts = getattr(self, "extra_hosts", set()) | {m.group(1)}
        log(f"the gate's upstream {upstream}: an echo app at 127.0.0.1:{self.app.port}")

    def gate_key(self):
        """The gate's signing key, made as docs/kubernetes.md says (queue-gate --write-key)."""
        if not any(re.fullmatch(r"queue-gate-keys(-[a-z0-9]{10})?", n) for n in self.secrets):
            return
        path = os.path.join(self.tmp, "gate-key.pem")
        out = subprocess.run([os.path.join(ROOT, "target", "release", "queue-gate"), "--write-key", path],
                             capture_output=True, text=True)
        if out.returncode != 0:
            raise Failure(f"queue-gate --write-key: {out.stderr.strip()}")
        name = self.secret_named("queue-gate-keys")
        with open(path) as f:
            self.secrets[name]["gate-key.pem"] = f.read()
        log("queue-gate: a fresh signing key in Secret queue-gate-keys (queue-gate --write-key)")

    # -- pods --------------------------------------------------------------------------

    def plan_ports(self):
        """A free loopback port for every containerPort of every replica."""
        self.pod_ports = {}
        for w in self.workloads:
            for i in range(w["spec"].get("replicas", 1)):
                c = w["spec"]["template"]["spec"]["containers"][0]
                self.pod_ports[(w["metadata"]["name"], i)] = {p["containerPort"]: free_port() for p in c.get("ports", [])}
        # Services: port -> the loopback port clients use (the pod's, or a proxy's).
        self.service_ports = {}
        self.service_backends = {}
        for s in self.services:
            sel = s["spec"].get("selector", {})
            backing = [w for w in self.workloads
                       if all(w["spec"]["template"]["metadata"]["labels"].get(k) == v for k, v in sel.items())]
            if not backing:
                continue
            w = backing[0]
            c = w["spec"]["template"]["spec"]["containers"][0]
            named = {p["name"]: p["containerPort"] for p in c.get("ports", []) if "name" in p}
            for sp in s["spec"]["ports"]:
                target = sp.get("targetPort", sp["port"])
                target = named[target] if isinstance(target, str) else target
                backends = [self.pod_ports[(w["metadata"]["name"], i)][target]
                            for i in range(w["spec"].get("replicas", 1))]
                self.service_backends[(s["metadata"]["name"], sp["port"])] = backends

    def open_services(self):
        for (name, port), backends in self.service_backends.items():
            if len(backends) == 1:
                self.service_ports[(name, port)] = backends[0]
            else:
                rr = RoundRobin(name, backends)
                self.proxies.append(rr)
                self.service_ports[(name, port)] = rr.port
            log(f"Service {name}:{port} -> 127.0.0.1:{self.service_ports[(name, port)]}"
                f"{'' if len(backends) == 1 else ' (round robin over ' + str(backends) + ')'}")

    def rewrite(self, value, own_ports):
        """A pod's own network namespace, on the host's loopback (see the module's doc)."""
        for port, local in own_ports.items():
            value = re.sub(rf"^0\.0\.0\.0:{port}$", f"127.0.0.1:{local}", value)
            if value == str(port):
                value = str(local)
        for (name, port), local in self.service_ports.items():
            ns = "valkey-queue"
            for host in (name, f"{name}.{ns}", f"{name}.{ns}.svc", f"{name}.{ns}.svc.cluster.local"):
                value = re.sub(rf"(?<=[/@]){re.escape(host)}:{port}(?=[/,]|$)", f"{name}:{local}", value)
        return value

    def env_of(self, container, pod_name):
        env = {}
        for src in container.get("envFrom", []):
            if "configMapRef" in src:
                data = self.configmaps[src["configMapRef"]["name"]]
            else:
                data = self.secrets[src["secretRef"]["name"]]
            for k, v in data.items():
                env[src.get("prefix", "") + k] = v
        for e in container.get("env", []):
            if "value" in e:
                env[e["name"]] = expand(e["value"], env)
            elif "valueFrom" in e:
                vf = e["valueFrom"]
                if "configMapKeyRef" in vf:
                    ref = vf["configMapKeyRef"]
                    env[e["name"]] = self.configmaps[ref["name"]][ref["key"]]
                elif "secretKeyRef" in vf:
                    ref = vf["secretKeyRef"]
                    env[e["name"]] = self.secrets[ref["name"]][ref["key"]]
                elif "fieldRef" in vf:
                    field = vf["fieldRef"]["fieldPath"]
                    env[e["name"]] = {"metadata.name": pod_name, "metadata.namespace": "valkey-queue",
                                      "status.podIP": "127.0.0.1", "spec.nodeName": "play"}[field]
                else:
                    raise Failure(f"env valueFrom not played here: {vf}")
            else:
                env[e["name"]] = ""
        return env

    def volume_dirs(self, workload, pod_name, fs_group):
        """Each volume of the pod as a host directory, as kubelet lays them out."""
        spec = workload["spec"]["template"]["spec"]
        dirs = {}
        gid = fs_group if fs_group is not None else 0

        def files(name, data, items, mode):
            d = os.path.join(self.tmp, pod_name, name)
            os.makedirs(d)
            keys = [(i["key"], i["path"], i.get("mode", mode)) for i in items] if items else \
                [(k, k, mode) for k in data]
            for key, path, m in keys:
                p = os.path.join(d, path)
                with open(p, "w") as f:
                    f.write(data[key])
                os.chown(p, 0, gid)
                os.chmod(p, m)
            os.chown(d, 0, gid)
            os.chmod(d, 0o755)
            return d
        for v in spec.get("volumes", []):
            if "secret" in v:
                s = v["secret"]
                dirs[v["name"]] = files(v["name"], self.secrets[s["secretName"]], s.get("items"), s.get("defaultMode", 0o644))
            elif "configMap" in v:
                c = v["configMap"]
                dirs[v["name"]] = files(v["name"], self.configmaps[c["name"]], c.get("items"), c.get("defaultMode", 0o644))
            elif "emptyDir" in v:
                d = os.path.join(self.tmp, pod_name, v["name"])
                os.makedirs(d)
                os.chmod(d, 0o777)
                dirs[v["name"]] = d
            else:
                raise Failure(f"volume kind not played here: {v}")
        for t in workload["spec"].get("volumeClaimTemplates", []):
            # A fresh PersistentVolume: owned by the fsGroup, setgid, as kubelet leaves it.
            d = os.path.join(self.tmp, pod_name, t["metadata"]["name"])
            os.makedirs(d)
            os.chown(d, 0, gid)
            os.chmod(d, 0o2775)
            dirs[t["metadata"]["name"]] = d
        return dirs

    def start(self, workload, index):
        name = workload["metadata"]["name"]
        spec = workload["spec"]["template"]["spec"]
        if len(spec["containers"]) != 1 or spec.get("initContainers"):
            raise Failure(f"{name}: one container per pod is played here")
        c = spec["containers"][0]
        pod_name = f"{name}-{index}" if workload["kind"] == "StatefulSet" else f"{name}-play-{index}"
        docker_name = f"{self.tag}-{pod_name}"
        own = self.pod_ports[(name, index)]
        env = {k: self.rewrite(v, own) for k, v in self.env_of(c, pod_name).items()}
        psc = spec.get("securityContext", {})
        csc = c.get("securityContext", {})
        sc = {**psc, **csc}
        image = self.local(c["image"])
        args = ["run", "-d", "--name", docker_name, "--network", "host",
                "--label", f"valkey-queue-kubelet={self.tag}"]
        for h in sorted({s["metadata"]["name"] for s in self.services} | getattr(self, "extra_hosts", set())):
            args += ["--add-host", f"{h}:127.0.0.1"]
        if "runAsUser" in sc:
            args += ["--user", f"{sc['runAsUser']}:{sc.get('runAsGroup', sc['runAsUser'])}"]
        if sc.get("runAsNonRoot"):
            uid = sc.get("runAsUser")
            if uid is None or uid == 0:
                raise Failure(f"{name}: runAsNonRoot without a non-zero runAsUser")
        fs_group = psc.get("fsGroup")
        if fs_group is not None:
            args += ["--group-add", str(fs_group)]
        for g in psc.get("supplementalGroups", []):
            args += ["--group-add", str(g)]
        if sc.get("readOnlyRootFilesystem"):
            args += ["--read-only"]
        caps = sc.get("capabilities", {})
        for cap in caps.get("drop", []):
            args += ["--cap-drop", cap]
        for cap in caps.get("add", []):
            args += ["--cap-add", cap]
        if sc.get("allowPrivilegeEscalation") is False:
            args += ["--security-opt", "no-new-privileges"]
        seccomp = sc.get("seccompProfile", {}).get("type")
        if seccomp not in ("RuntimeDefault", None):
            raise Failure(f"{name}: seccomp profile {seccomp} not played here")
        # RuntimeDefault is the container runtime's default profile: docker's own,
        # applied unless told otherwise (checked below on the running container).
        limits = c.get("resources", {}).get("limits", {})
        if "memory" in limits:
            args += ["--memory", str(quantity_bytes(limits["memory"]))]
        if "cpu" in limits:
            args += ["--cpus", str(quantity_cores(limits["cpu"]))]
        dirs = self.volume_dirs(workload, pod_name, fs_group)
        for m in c.get("volumeMounts", []):
            ro = ",readonly" if m.get("readOnly") else ""
            args += ["--mount", f"type=bind,source={dirs[m['name']]},target={m['mountPath']}{ro}"]
        for k, v in env.items():
            args += ["-e", f"{k}={v}"]
        command = [expand(x, env) for x in c.get("command", [])]
        cargs = [self.rewrite(expand(x, env), own) for x in c.get("args", [])]
        if command:
            args += ["--entrypoint", command[0]]
        args += [image, *command[1:], *cargs]
        docker(*args)
        ports = {}
        for p in c.get("ports", []):
            ports[p["containerPort"]] = own[p["containerPort"]]
            if "name" in p:
                ports[p["name"]] = own[p["containerPort"]]
        pod = Pod(self.overlay, workload, index, c, docker_name, ports, spec.get("terminationGracePeriodSeconds", 30))
        pod.started_at = time.monotonic()
        self.pods.append(pod)
        # What docker made of it, as kubelet's runtime would report it.
        info = json.loads(docker("inspect", docker_name).stdout)[0]
        hc = info["HostConfig"]
        assert hc["ReadonlyRootfs"] == bool(sc.get("readOnlyRootFilesystem")), "read-only root"
        assert "ALL" in (hc["CapDrop"] or []) or not caps.get("drop"), "capabilities"
        assert not any(o.startswith("seccomp=unconfined") for o in (hc["SecurityOpt"] or [])), "seccomp"
        log(f"{pod.label()}: {image} as {info['Config']['User'] or 'image user'}, "
            f"{'read-only root, ' if hc['ReadonlyRootfs'] else ''}cap-drop {hc['CapDrop']}, "
            f"seccomp docker default, limits {limits}, ports {own}")
        return pod

    # -- the whole play ----------------------------------------------------------------

    def run(self):
        results = {}
        if self.overlay.startswith("managed-valkey"):
            self.managed_valkey()
        self.gate_key()
        self.plan_ports()
        self.open_services()
        self.gate_upstream()
        for w in self.workloads:
            for i in range(w["spec"].get("replicas", 1)):
                self.start(w, i)
        # Probe every pod as kubelet does, all at once.
        threads = [threading.Thread(target=p.run_probes, daemon=True) for p in self.pods]
        for t in threads:
            t.start()
        for t in threads:
            t.join(180)
        for p in self.pods:
            if p.failure or p.ready_at is None:
                raise Failure(p.failure or f"{p.label()}: not ready after 180 s")
            log(f"{p.label()}: ready {p.ready_at - p.started_at:.1f} s after start")
        self.wait_for_store()
        if self.overlay.startswith("in-cluster-valkey"):
            acl = self.secrets[self.secret_named("valkey-acl")]["users.acl"]
            pw = re.search(r"user admin on >(\S+)", acl).group(1)
            vport = self.service_ports[("valkey", 6379)]
            self.admin_cli = ["valkey-cli", "-h", "127.0.0.1", "-p", str(vport), "--user", "admin",
                              "--pass", pw, "--no-auth-warning"]
        backend = "module" if "queue" in self.valkey("MODULE", "LIST") else "Lua library"
        log(f"Valkey backend: {backend}")
        results["backend"] = backend
        # A queue to swarm through, set through queue-api's back office.
        api = self.service_ports[("queue-api", 8080)]
        chat = self.service_ports[("chat-server", 8081)]
        token = self.secrets[self.secret_named("valkey-queue-secrets")]["admin-token"]
        self.set_default_queue(token, {"soft_cap": 50, "ticket_ttl": 10000, "abandon_after": 5000})
        idle = self.stats()
        cpu_before = {p.name: proc_cpu_seconds(p.name) for p in self.pods}
        sampler = Sampler(self)
        cli = os.path.join(ROOT, "target", "release", "queue-cli")
        cmd = [cli, "swarm", "--api", f"http://127.0.0.1:{api}", "--chat", f"http://127.0.0.1:{chat}",
               "--users", str(self.users), "--rate", "100", "--stay-secs", "1", "--admin-token", token,
               "--timeout-secs", "150", "--quiet"]
        log(f"swarm: queue-cli swarm --users {self.users} --rate 100 --stay-secs 1 --admin-token ... "
            f"through the Services (queue-api 127.0.0.1:{api}, chat-server 127.0.0.1:{chat})")
        t0 = time.monotonic()
        swarm = subprocess.run(cmd, capture_output=True, text=True, timeout=240)
        swarm_secs = time.monotonic() - t0
        sampler.stop()
        self.cpu_used = {p.name: proc_cpu_seconds(p.name) - cpu_before[p.name] for p in self.pods}
        self.peak_rss = {p.name: proc_peak_rss(p.name) for p in self.pods}
        self.swarm_secs = time.monotonic() - t0
        print(swarm.stdout, end="", flush=True)
        if swarm.returncode != 0:
            print(swarm.stderr, file=sys.stderr)
            raise Failure(f"swarm exited {swarm.returncode} (1: an audit failed, 2: a journey did not finish)")
        results["swarm_seconds"] = swarm_secs
        if self.app is not None:
            self.gate_swarm(token)
        for p in self.pods:
            if p.failure:
                raise Failure(p.failure)
        self.report_resources(idle, sampler)
        self.audit_acl_log()
        # Streams open while queue-api stops: the drain must end them within the grace.
        held = self.open_streams() + self.open_sessions()
        # Stop every pod as kubelet does: services first (in parallel), then Valkey.
        order = [[p for p in self.pods if p.workload["kind"] == "Deployment"],
                 [p for p in self.pods if p.workload["kind"] == "StatefulSet"]]
        failures = []
        for group in order:
            outcomes = {}

            def stop(p):
                outcomes[p.name] = p.stop()
            ts = [threading.Thread(target=stop, args=(p,)) for p in group]
            for t in ts:
                t.start()
            for t in ts:
                t.join()
            for p in group:
                took, code = outcomes[p.name]
                verdict = "ok" if code == 0 and took <= p.grace else "FAIL"
                log(f"{p.label()}: stopped in {took:.1f} s of its {p.grace} s grace, exit {code} [{verdict}]; "
                    f"liveness {p.liveness['probes']} probes, {p.liveness['failed']} failed; "
                    f"readiness {p.readiness['probes']} probes, {p.readiness['failed']} failed")
                if verdict != "ok":
                    failures.append(f"{p.label()}: exit {code} after {took:.1f} s (grace {p.grace} s)")
                if p.liveness["failed"]:
                    failures.append(f"{p.label()}: {p.liveness['failed']} liveness probes failed")
            if group is order[0]:
                for sock in held:
                    sock.close()
                log(f"push streams and chat sessions open at SIGTERM: {len(held)} (their pods exited 0 within "
                    f"the grace; the sessions' leases are checked next)")
                left = self.sessions_left()
                log(f"sessions left in Valkey after the services stopped: {left}")
                if left != 0:
                    failures.append(f"{left} sessions left after the services stopped")
        if failures:
            raise Failure("; ".join(failures))
        return results

    # Refusals the client expects and handles (it then finds out another way), and
    # FUNCTION LOAD by a service whose user may not load the library (managed overlay:
    # queue-manager's may, the others wait for it).
    EXPECTED_REFUSALS = ("module|list", "function|list", "client|setinfo", "function|load")

    def audit_acl_log(self):
        self.valkey("CONFIG", "SET", "acllog-max-len", "1000")
        out = subprocess.run([*self.admin_cli, "--json", "ACL", "LOG", "1000"], capture_output=True, text=True,
                             timeout=10).stdout
        entries = json.loads(out) if out.strip() else []
        unexpected = []
        for e in entries:
            fields = e if isinstance(e, dict) else dict(zip(e[::2], e[1::2]))
            if fields.get("object") not in self.EXPECTED_REFUSALS:
                unexpected.append(f"{fields.get('username')} {fields.get('reason')} {fields.get('object')}")
        log(f"ACL LOG: {len(entries)} refusals, {len(unexpected)} beyond the client's expected probes")
        if unexpected:
            raise Failure(f"Valkey refused the services: {sorted(set(unexpected))}")

    def wait_for_store(self):
        """Ready is not connected: /healthz answers 200 while Valkey is away (every pod
        shares it; taking them all out of their Service would help nobody), and a
        service that started before Valkey reconnects with backoff (up to 5 s). The
        swarm starts once every pod's /healthz says Valkey is up, as docker/ci.sh
        waits for its containers' health."""
        for p in self.pods:
            probe = p.spec.get("readinessProbe", {}).get("httpGet")
            if not probe:
                continue
            port = p.ports[probe["port"]]
            # The service's health answer that names Valkey ({"valkey": "up"}, or the
            # gate's {"valkey": true} at /gate/healthz, 503 while down).
            urls = [f"http://127.0.0.1:{port}{path}" for path in dict.fromkeys([probe["path"], "/gate/healthz"])]
            deadline = time.monotonic() + 30
            while True:
                up = False
                for url in urls:
                    try:
                        with urllib.request.urlopen(url, timeout=2) as resp:
                            body = json.loads(resp.read())
                            if isinstance(body, dict) and "valkey" in body:
                                up = body["valkey"] in ("up", True)
                                break
                    except urllib.error.HTTPError:
                        break
                    except (OSError, ValueError):
                        continue
                if up:
                    break
                if time.monotonic() > deadline:
                    raise Failure(f"{p.label()}: /healthz never said valkey up")
                time.sleep(0.2)
            log(f"{p.label()}: Valkey up {time.monotonic() - p.started_at:.1f} s after start")

    def set_default_queue(self, token, settings):
        """Sets the queue `default`'s settings through queue-api's back office."""
        api = self.service_ports[("queue-api", 8080)]
        req = urllib.request.Request(
            f"http://127.0.0.1:{api}/api/admin/queues/default", method="PUT", data=json.dumps(settings).encode(),
            headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=10) as resp:
                log(f"PUT /api/admin/queues/default {settings}: {resp.status}")
        except urllib.error.HTTPError as e:
            raise Failure(f"PUT /api/admin/queues/default: {e.code} {e.read().decode(errors='replace')}")

    def gate_swarm(self, token):
        """People through the gate: let straight in while nobody waits and a slot is
        free, else sent to its waiting room and claimed; in the app.
        Through one gate replica, as the Ingress's cookie affinity sends each person
        (docs/kubernetes.md, "The gate"): another replica learns of a /gate/leave at
        its next tick, so over the round-robin Service a token could still open the
        app on the other replica for up to a tick after leaving, which the swarm's
        audit counts. Both replicas run and share Valkey meanwhile."""
        gate = self.pods_of("queue-gate")[0].ports["http"]
        api = self.service_ports[("queue-api", 8080)]
        chat = self.service_ports[("chat-server", 8081)]
        users = max(50, self.users // 4)
        # A room of 10: the first people go straight in, the crowd after them walks
        # the waiting room and claims.
        self.set_default_queue(token, {"soft_cap": 10})
        cmd = [os.path.join(ROOT, "target", "release", "queue-cli"), "swarm", "--api", f"http://127.0.0.1:{api}",
               "--chat", f"http://127.0.0.1:{chat}", "--gate", f"http://127.0.0.1:{gate}", "--gate-path", "/checkout",
               "--gate-idle", "0", "--users", str(users), "--rate", "50", "--stay-secs", "1",
               "--admin-token", token, "--timeout-secs", "150", "--quiet", "--seed", "2"]
        log(f"swarm through the gate (replica 0): queue-cli swarm --gate ... --gate-path /checkout "
            f"--users {users} --rate 50")
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=240)
        print(out.stdout, end="", flush=True)
        if out.returncode != 0:
            print(out.stderr, file=sys.stderr)
            raise Failure(f"swarm through the gate exited {out.returncode}")

    def pods_of(self, name):
        """The pods of the workload `name`, in start order."""
        return [p for p in self.pods if p.workload["metadata"]["name"] == name]

    def open_sessions(self, per_pod=5):
        """People inside, on a WebSocket to each chat-server pod, as the SIGTERM comes:
        the drain must end their sessions (no lease left in Valkey after)."""
        held = []
        api = self.service_ports[("queue-api", 8080)]
        n = 0
        for p in self.pods_of("chat-server"):
            for _ in range(per_pod):
                n += 1
                standing = enter(api, f"inside{n}", "default", f"10.8.0.{n}")
                deadline = time.monotonic() + 15
                while not standing.get("ticketId"):
                    if time.monotonic() > deadline:
                        raise Failure(f"no ticket for a person inside: {standing}")
                    time.sleep(0.3)
                    with urllib.request.urlopen(
                            f"http://127.0.0.1:{api}/api/queue/status?userId={standing['userId']}&queue=default",
                            timeout=10) as resp:
                        standing = json.loads(resp.read())
                key = base64.b64encode(os.urandom(16)).decode()
                held.append(held_open(
                    p.ports["http"], 101, "chat handshake",
                    f"GET /gameserver?ticketId={standing['ticketId']}&queue=default HTTP/1.1\r\n"
                    f"Host: chat\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                    f"Sec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n\r\n"))
        active = self.sessions_active()
        log(f"chat sessions held open for the stop: {len(held)} (Valkey counts {active} active)")
        if active < len(held):
            raise Failure(f"Valkey counts {active} sessions, {len(held)} were opened")
        return held

    def open_streams(self, per_pod=10):
        """People waiting on push streams, straight at each queue-api pod."""
        held = []
        token = self.secrets[self.secret_named("valkey-queue-secrets")]["admin-token"]
        api = self.service_ports[("queue-api", 8080)]
        # A line to wait in: one admitted, the others wait on their streams.
        req = urllib.request.Request(
            f"http://127.0.0.1:{api}/api/admin/queues/drain", method="PUT", data=b'{"soft_cap": 1}',
            headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"})
        urllib.request.urlopen(req, timeout=10).close()
        n = 0
        for p in self.pods_of("queue-api"):
            for _ in range(per_pod):
                n += 1
                user = enter(p.ports["http"], f"drain{n}", "drain", f"10.9.0.{n}")["userId"]
                held.append(held_open(
                    p.ports["http"], 200, "push stream",
                    f"GET /api/queue/stream?userId={user}&queue=drain HTTP/1.1\r\nHost: q\r\n"
                    f"X-Forwarded-For: 10.9.0.{n}\r\nAccept: text/event-stream\r\n\r\n"))
        return held

    def valkey(self, *args):
        out = subprocess.run([*self.admin_cli, *args], capture_output=True, text=True, timeout=10)
        return out.stdout

    def sessions_active(self):
        return self.sessions_left()

    def sessions_left(self):
        if "queue" in self.valkey("MODULE", "LIST"):
            info = self.valkey("QUEUE.INFO", "default").split("\n")
        else:
            info = self.valkey("FCALL_RO", "queue_info", "1", "default").split("\n")
        for i, line in enumerate(info):
            if line.strip() == "active" and i + 1 < len(info):
                return int(info[i + 1])
        raise Failure(f"no active count in QUEUE.INFO: {info}")

    def stats(self):
        out = docker("stats", "--no-stream", "--format", "{{.Name}}\t{{.CPUPerc}}\t{{.MemUsage}}",
                     *[p.name for p in self.pods], check=False)
        rows = {}
        for line in out.stdout.splitlines():
            name, cpu, mem = line.split("\t")
            rows[name] = (float(cpu.rstrip("%")), quantity_bytes(mem.split("/")[0].strip().replace("iB", "i")))
        return rows

    def report_resources(self, idle, sampler):
        log("resources: docker stats (the cgroup's working set, what a memory limit counts) idle before the "
            "swarm and its peak in samples during it; CPU: the process's own seconds over the swarm, as a share "
            "of a core; peak RSS: the process's VmHWM")
        by_workload = {}
        for p in self.pods:
            w = p.workload["metadata"]["name"]
            i_cpu, i_mem = idle.get(p.name, (0, 0))
            peaks = sampler.peak.get(p.name, (0, 0))
            lim = p.spec.get("resources", {})
            mean = self.cpu_used[p.name] / self.swarm_secs
            log(f"  {p.label():28} idle {i_cpu:4.1f}% {i_mem / 2**20:5.1f} MiB | swarm: mean {100 * mean:5.1f}% "
                f"peak {peaks[0]:5.1f}% of a core, working set peak {peaks[1] / 2**20:5.1f} MiB, "
                f"VmHWM {self.peak_rss[p.name] / 2**20:5.1f} MiB | requests {lim.get('requests')} "
                f"limits {lim.get('limits')}")
            by_workload.setdefault(w, []).append(peaks)
        self.resource_figures = by_workload

    def cleanup(self, keep_logs):
        for p in self.pods:
            if keep_logs:
                out = docker("logs", p.name, check=False)
                lines = (out.stdout + out.stderr).splitlines()
                worst = [line for line in lines if '"WARN"' in line or '"ERROR"' in line or " WARN " in line
                         or " ERROR " in line][-15:]
                print(f"--- logs of {p.label()} ({p.name}): {len(lines)} lines; its last warnings and errors, "
                      f"then its last lines ---", file=sys.stderr)
                print("\n".join(worst + ["..."] + lines[-10:]), file=sys.stderr)
            docker("rm", "-f", p.name, check=False)
        for rr in self.proxies:
            rr.stop()
        if getattr(self, "app", None) is not None:
            self.app.stop()
        for c in self.children:
            c.terminate()
            try:
                c.wait(10)
            except subprocess.TimeoutExpired:
                c.kill()
        if keep_logs and os.path.exists(os.path.join(self.tmp, "valkey", "valkey.log")):
            with open(os.path.join(self.tmp, "valkey", "valkey.log")) as f:
                print(f"--- managed valkey-server log ---\n{f.read()[-3000:]}", file=sys.stderr)
        shutil.rmtree(self.tmp, ignore_errors=True)


class Sampler:
    """docker stats every ~2 s while the swarm runs; keeps each container's peak."""

    def __init__(self, play):
        self.play = play
        self.peak = {}
        self.done = threading.Event()
        self.thread = threading.Thread(target=self.run, daemon=True)
        self.thread.start()

    def run(self):
        while not self.done.is_set():
            for name, (cpu, mem) in self.play.stats().items():
                c, m = self.peak.get(name, (0, 0))
                self.peak[name] = (max(c, cpu), max(m, mem))
            self.done.wait(0.5)

    def stop(self):
        self.done.set()
        self.thread.join(30)


def container_pid(name):
    return int(docker("inspect", "-f", "{{.State.Pid}}", name).stdout.strip())


def proc_cpu_seconds(name):
    """utime + stime of the container's process (its PID 1: each image runs one)."""
    with open(f"/proc/{container_pid(name)}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def proc_peak_rss(name):
    with open(f"/proc/{container_pid(name)}/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    return 0


UNITS = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "k": 10**3, "K": 10**3, "M": 10**6, "G": 10**9,
         "T": 10**12, "B": 1, "kB": 10**3, "MB": 10**6, "GB": 10**9}


def quantity_bytes(q):
    q = str(q).strip()
    m = re.fullmatch(r"([0-9.]+)\s*([A-Za-z]*)", q)
    if not m:
        raise Failure(f"not a quantity: {q}")
    return int(float(m.group(1)) * UNITS.get(m.group(2), 1))


def quantity_cores(q):
    q = str(q)
    return int(q[:-1]) / 1000 if q.endswith("m") else float(q)


def play(overlay, docs, local_image, argv):
    options = {}
    if "--users" in argv:
        options["users"] = int(argv[argv.index("--users") + 1])
    p = Play(overlay, docs, local_image, options)
    ok = False
    t0 = time.monotonic()
    try:
        p.run()
        ok = True
    except Exception as e:  # noqa: BLE001 (any failure fails the play, with its logs)
        print(f"FAIL play {overlay}: {e}", file=sys.stderr)
        if getattr(p, "admin_cli", None):
            # What Valkey refused the services (a missing ACL rule shows here).
            refused = p.valkey("ACL", "LOG", "20")
            print(f"--- ACL LOG ---\n{refused[:3000]}", file=sys.stderr)
    finally:
        p.cleanup(keep_logs=not ok)
    if not ok:
        sys.exit(1)
    log(f"play {overlay}: every pod ready, live, swarm clean, every stop clean ({time.monotonic() - t0:.0f} s)")
