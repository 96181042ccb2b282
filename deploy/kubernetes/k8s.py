#!/usr/bin/env python3
"""The Kubernetes manifests' checks, without a cluster (deploy/kubernetes/check.sh runs them all).

  k8s.py sync              regenerate components/prometheus-operator/prometheusrule.yaml and
                           base/dashboards/ from docker/
  k8s.py drift             fail when they differ from docker/ (rules identical, dashboards equal),
                           or when the ACL users grant less than docs/cluster-tls-acl.md
  k8s.py render OVERLAY    the overlay as `kubectl kustomize` renders it (YAML on stdout);
                           OVERLAY+gate+monitoring: with components/gate and
                           components/prometheus-operator added to it
  k8s.py validate          every manifest and each rendered overlay, strictly against the
                           Kubernetes schemas (and the prometheus-operator CRDs)
  k8s.py selftest          the validator refuses bad manifests (unknown field, wrong type,
                           missing required field), each in a core object and a CRD
  k8s.py user-ids          the images' user ids are the runAsUser of the pods running them
  k8s.py play OVERLAY      play kubelet: run every Deployment and StatefulSet with docker as
                           its spec says, probe, swarm through them, stop them (kubelet.py)
"""
import copy
import json
import os
import shutil
import subprocess
import sys

import yaml

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
OVERLAYS = ["in-cluster-valkey", "managed-valkey"]
# Optional components, added to an overlay by a suffix: OVERLAY+gate+monitoring.
COMPONENTS = {"gate": "gate", "monitoring": "prometheus-operator"}
# What is validated: each overlay alone and with every component; what is played: the
# latter.
VARIANTS = [v for o in OVERLAYS for v in (o, o + "+gate+monitoring")]
# The Kubernetes release whose schemas the manifests are held to.
KUBERNETES_VERSION = "1.37.0"
ALERTS = os.path.join(ROOT, "docker", "prometheus", "alerts.yml")
DASHBOARDS = os.path.join(ROOT, "docker", "grafana", "dashboards")
RULE_FILE = os.path.join(HERE, "components", "prometheus-operator", "prometheusrule.yaml")
BASE_DASHBOARDS = os.path.join(HERE, "base", "dashboards")


def fail(msg):
    print(f"FAIL {msg}", file=sys.stderr)
    sys.exit(1)


# ---------------------------------------------------------------- sync and drift

RULE_HEADER = """\
# Generated from docker/prometheus/alerts.yml by `python3 deploy/kubernetes/k8s.py sync`:
# edit the rules there (where promtool tests them) and regenerate; `k8s.py drift` fails
# while the two differ. For prometheus-operator's Prometheus (its ruleSelector must
# match these labels: docs/kubernetes.md).
"""


def prometheus_rule():
    with open(ALERTS) as f:
        alerts = yaml.safe_load(f)
    return {
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "PrometheusRule",
        "metadata": {"name": "valkey-queue", "labels": {"app.kubernetes.io/name": "valkey-queue"}},
        "spec": {"groups": alerts["groups"]},
    }


def rule_text():
    return RULE_HEADER + yaml.safe_dump(prometheus_rule(), sort_keys=False, width=100, allow_unicode=True)


def dashboard_names():
    return sorted(n for n in os.listdir(DASHBOARDS) if n.endswith(".json"))


def sync():
    with open(RULE_FILE, "w") as f:
        f.write(rule_text())
    os.makedirs(BASE_DASHBOARDS, exist_ok=True)
    for name in os.listdir(BASE_DASHBOARDS):
        if name not in dashboard_names():
            os.remove(os.path.join(BASE_DASHBOARDS, name))
    for name in dashboard_names():
        with open(os.path.join(DASHBOARDS, name), "rb") as src, open(os.path.join(BASE_DASHBOARDS, name), "wb") as dst:
            dst.write(src.read())
    print(f"wrote {os.path.relpath(RULE_FILE, ROOT)} and {len(dashboard_names())} dashboards")


def drift():
    problems = []
    with open(ALERTS) as f:
        want = yaml.safe_load(f)["groups"]
    # The rule file as committed, and each overlay's rendering of it, hold exactly
    # alerts.yml's groups (names, expressions, durations, labels, annotations).
    with open(RULE_FILE) as f:
        got = yaml.safe_load(f)
    if got["spec"]["groups"] != want:
        problems.append(f"{os.path.relpath(RULE_FILE, ROOT)} differs from docker/prometheus/alerts.yml")
    for overlay in OVERLAYS:
        rules = [d for d in render(overlay + "+monitoring") if d["kind"] == "PrometheusRule"]
        if len(rules) != 1 or rules[0]["spec"]["groups"] != want:
            problems.append(f"overlay {overlay}: its PrometheusRule differs from docker/prometheus/alerts.yml")
    # The dashboards: the same files, byte for byte, and in each overlay's ConfigMap.
    base = sorted(n for n in os.listdir(BASE_DASHBOARDS)) if os.path.isdir(BASE_DASHBOARDS) else []
    if base != dashboard_names():
        problems.append(f"base/dashboards holds {base}, docker/grafana/dashboards {dashboard_names()}")
    for name in dashboard_names():
        with open(os.path.join(DASHBOARDS, name)) as a:
            src = a.read()
        path = os.path.join(BASE_DASHBOARDS, name)
        if os.path.exists(path):
            with open(path) as b:
                if b.read() != src:
                    problems.append(f"base/dashboards/{name} differs from docker/grafana/dashboards/{name}")
        for overlay in OVERLAYS:
            cms = [d for d in render(overlay) if d["kind"] == "ConfigMap" and name in d.get("data", {})]
            if len(cms) != 1 or cms[0]["data"][name] != src:
                problems.append(f"overlay {overlay}: no dashboards ConfigMap holding {name} as in docker/")
            elif cms[0]["metadata"].get("labels", {}).get("grafana_dashboard") != "1":
                problems.append(f"overlay {overlay}: the dashboards ConfigMap lacks the grafana_dashboard label")
    problems += acl_drift()
    if problems:
        fail("drift:\n  " + "\n  ".join(problems) + "\n  (run: python3 deploy/kubernetes/k8s.py sync)")
    print(f"drift: PrometheusRule == docker/prometheus/alerts.yml ({sum(len(g['rules']) for g in want)} rules), "
          f"{len(dashboard_names())} dashboards equal, in the files and both overlays; the ACL users grant at least "
          f"docs/cluster-tls-acl.md's rules")


ACL_DOC = os.path.join(ROOT, "docs", "cluster-tls-acl.md")


def acl_lines(path):
    """user name -> the tokens of its rule, from an ACL file."""
    out = {}
    with open(path) as f:
        for line in f:
            parts = line.split()
            if len(parts) > 2 and parts[0] == "user":
                out[parts[1]] = set(parts[2:])
    return out


def acl_drift():
    """Each service's ACL users here grant at least the rules docs/cluster-tls-acl.md
    gives (which tests/acl.rs holds the services to): with the module in the cluster,
    with the Lua library on the managed service."""
    import re
    with open(ACL_DOC) as f:
        doc = f.read()
    module = dict(re.findall(r"^\| (queue-api|queue-manager|chat-server) \| `([^`]+)` \|$", doc, re.M))
    lua = re.search(r"`(\+get \+set \+del [^`]*\(\+fcall \+fcall_ro ~\*\))`", doc)
    if len(module) != 3 or not lua:
        return [f"{os.path.relpath(ACL_DOC, ROOT)}: its table of the services' ACL rules was not found"]
    problems = []
    in_cluster = acl_lines(os.path.join(HERE, "overlays", "in-cluster-valkey", "users.acl"))
    managed = acl_lines(os.path.join(HERE, "overlays", "managed-valkey", "valkey-users.acl"))
    for service, rule in module.items():
        want = set(rule.split())
        missing = want - in_cluster.get(service, set())
        if missing:
            problems.append(f"in-cluster-valkey/users.acl: {service} lacks {sorted(missing)} of the module rule")
        want_lua = (want - {"(+@queue", "~*)"}) | set(lua.group(1).split())
        want_lua |= {"&queue:{*}:promoted", "&queue:{*}:changes"}
        missing = want_lua - managed.get(service, set())
        if missing:
            problems.append(f"managed-valkey/valkey-users.acl: {service} lacks {sorted(missing)} of the Lua rule")
    return problems


# ---------------------------------------------------------------- rendering

def kubectl():
    for cand in (os.environ.get("KUBECTL"), "kubectl"):
        if cand and subprocess.run(["sh", "-c", f"command -v {cand}"], capture_output=True).returncode == 0:
            return cand
    fail("kubectl not found (scripts/install-deps.sh installs it)")


_rendered = {}


def render_dir(path):
    """`kubectl kustomize` of a directory (what `kubectl apply -k` applies)."""
    if path not in _rendered:
        out = subprocess.run([kubectl(), "kustomize", path], capture_output=True, text=True)
        if out.returncode != 0:
            fail(f"kubectl kustomize {os.path.relpath(path, ROOT)}: {out.stderr.strip()}")
        _rendered[path] = [d for d in yaml.safe_load_all(out.stdout) if d]
    return copy.deepcopy(_rendered[path])


def render(overlay):
    """An overlay as applied; `OVERLAY+gate+monitoring` is the overlay with those
    components (COMPONENTS) added to its kustomization, as docs/kubernetes.md says to
    (inside it, so that the overlay's own patches reach them too)."""
    base, *extra = overlay.split("+")
    if not extra:
        return render_dir(os.path.join(HERE, "overlays", base))
    # A copy beside the overlay (the same relative paths), with the components.
    tmp = os.path.join(HERE, "overlays", f".{base}-with-{'-'.join(extra)}-{os.getpid()}")
    if tmp not in _rendered:
        shutil.copytree(os.path.join(HERE, "overlays", base), tmp)
        try:
            with open(os.path.join(tmp, "kustomization.yaml"), "a") as f:
                f.write("components:\n")
                for name in extra:
                    f.write(f"  - ../../components/{COMPONENTS[name]}\n")
            render_dir(tmp)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    return copy.deepcopy(_rendered[tmp])


# ---------------------------------------------------------------- validation

def crd_models():
    """prometheus-operator's CRDs as pydantic models (generated from the CRDs' OpenAPI)."""
    from cloudcoil.models.prometheus_operator import v1
    return {"ServiceMonitor": v1.ServiceMonitor, "PrometheusRule": v1.PrometheusRule}


def unknown_fields(given, kept, path=""):
    """Fields of `given` that the model dropped: unknown to the schema."""
    out = []
    if isinstance(given, dict):
        for k, v in given.items():
            if not isinstance(kept, dict) or k not in kept:
                out.append(f"{path}.{k}")
            else:
                out += unknown_fields(v, kept[k], f"{path}.{k}")
    elif isinstance(given, list):
        for i, v in enumerate(given):
            out += unknown_fields(v, kept[i] if isinstance(kept, list) and i < len(kept) else None, f"{path}[{i}]")
    return out


def validate_doc(doc):
    """None when `doc` is valid, else why not. Core kinds against kubernetes-validate's
    strict schemas (unknown fields, wrong types and missing required fields refused),
    prometheus-operator kinds against its CRDs' models, unknown fields refused too."""
    kind = doc.get("kind")
    if doc.get("apiVersion") == "monitoring.coreos.com/v1":
        import pydantic
        model = crd_models().get(kind)
        if model is None:
            return f"no schema for {kind}"
        try:
            # Strict: no coercion (a number is not a string); JSON mode, as the API server reads it.
            m = model.model_validate_json(json.dumps(doc), strict=True)
        except pydantic.ValidationError as e:
            return str(e).replace("\n", " ")
        extra = unknown_fields(doc, m.model_dump(mode="json", by_alias=True, exclude_unset=True))
        return f"unknown fields {extra}" if extra else None
    import kubernetes_validate
    try:
        kubernetes_validate.validate(doc, KUBERNETES_VERSION, strict=True)
    except kubernetes_validate.ValidationError as e:
        return f"{'.'.join(str(p) for p in e.path)}: {e.message}"
    except kubernetes_validate.SchemaNotFoundError as e:
        return e.message
    return None


def kustomization_dirs():
    out = []
    for dirpath, _dirs, files in os.walk(HERE):
        if "kustomization.yaml" in files:
            out.append(dirpath)
    return sorted(out)


def manifest_files():
    """Every YAML file a kustomization lists as a resource or patch."""
    files = []
    for d in kustomization_dirs():
        with open(os.path.join(d, "kustomization.yaml")) as f:
            k = yaml.safe_load(f)
        for r in k.get("resources", []):
            p = os.path.join(d, r)
            if os.path.isfile(p):
                files.append(p)
    return files


def validate():
    failures = 0
    count = 0
    # Each file on its own (names as written, before kustomize touches them).
    for path in manifest_files():
        with open(path) as f:
            docs = [d for d in yaml.safe_load_all(f) if d]
        for doc in docs:
            count += 1
            why = validate_doc(doc)
            if why:
                failures += 1
                print(f"ERROR {os.path.relpath(path, ROOT)} {doc['kind']}/{doc['metadata']['name']}: {why}")
    print(f"validate: {count} objects in {len(manifest_files())} files")
    # Each overlay as rendered (patches applied, generated ConfigMaps and Secrets),
    # alone and with the gate component.
    for overlay in VARIANTS:
        docs = render(overlay)
        kinds = {}
        for doc in docs:
            kinds[doc["kind"]] = kinds.get(doc["kind"], 0) + 1
            why = validate_doc(doc)
            if why:
                failures += 1
                print(f"ERROR overlay {overlay} {doc['kind']}/{doc['metadata']['name']}: {why}")
        summary = ", ".join(f"{n} {k}" for k, n in sorted(kinds.items()))
        print(f"validate: overlay {overlay}: {len(docs)} objects ({summary})")
    if failures:
        fail(f"validate: {failures} objects refused (Kubernetes {KUBERNETES_VERSION}, strict)")
    print(f"validate: every object valid against Kubernetes {KUBERNETES_VERSION} (strict) and the prometheus-operator CRDs")


def selftest():
    """The validator must refuse what a strict API server would."""
    docs = render("in-cluster-valkey+monitoring")
    deploy = next(d for d in docs if d["kind"] == "Deployment")
    sts = next(d for d in docs if d["kind"] == "StatefulSet")
    sm = next(d for d in docs if d["kind"] == "ServiceMonitor")
    rule = next(d for d in docs if d["kind"] == "PrometheusRule")
    for good in (deploy, sts, sm, rule):
        if validate_doc(good):
            fail(f"selftest: a good {good['kind']} refused: {validate_doc(good)}")
    cases = []

    def case(name, doc, mutate):
        bad = copy.deepcopy(doc)
        mutate(bad)
        cases.append((name, bad))

    c0 = lambda d: d["spec"]["template"]["spec"]["containers"][0]  # noqa: E731
    case("unknown field in a container", deploy, lambda d: c0(d).__setitem__("imagePullPolicyy", "Always"))
    case("unknown field in securityContext", deploy, lambda d: c0(d)["securityContext"].__setitem__("readOnlyRootFS", True))
    case("wrong type: replicas a string", deploy, lambda d: d["spec"].__setitem__("replicas", "2"))
    case("wrong type: containerPort a string", deploy, lambda d: c0(d)["ports"][0].__setitem__("containerPort", "8080"))
    case("missing required: container name", deploy, lambda d: c0(d).pop("name"))
    case("missing required: selector", deploy, lambda d: d["spec"].pop("selector"))
    case("missing required: the StatefulSet pod's containers", sts,
         lambda d: d["spec"]["template"]["spec"].pop("containers"))
    case("ServiceMonitor: unknown field", sm, lambda d: d["spec"]["endpoints"][0].__setitem__("intervall", "5s"))
    case("ServiceMonitor: wrong type", sm, lambda d: d["spec"]["endpoints"][0].__setitem__("port", 8080))
    case("ServiceMonitor: missing required selector", sm, lambda d: d["spec"].pop("selector"))
    case("PrometheusRule: unknown field", rule, lambda d: d["spec"]["groups"][0]["rules"][0].__setitem__("fore", "1m"))
    case("PrometheusRule: missing required group name", rule, lambda d: d["spec"]["groups"][0].pop("name"))
    passed = 0
    for name, bad in cases:
        why = validate_doc(bad)
        if not why:
            print(f"ERROR selftest: accepted a bad manifest ({name})")
        else:
            passed += 1
            print(f"selftest: refused ({name}): {why[:110]}")
    if passed != len(cases):
        fail(f"selftest: {len(cases) - passed} bad manifests accepted")
    # The drift test must see a change: one alert's `for:` and one dashboard byte.
    with open(ALERTS) as f:
        want = yaml.safe_load(f)["groups"]
    changed = copy.deepcopy(prometheus_rule())
    changed["spec"]["groups"][0]["rules"][0]["for"] = "11s"
    if changed["spec"]["groups"] == want or prometheus_rule()["spec"]["groups"] != want:
        fail("selftest: the drift comparison of rules does not see a changed `for:`")
    print("selftest: the drift comparison sees a changed alert")
    # The YAML reading: a file with a typo in a kind is refused too.
    if not validate_doc({"apiVersion": "apps/v1", "kind": "Deploymnet", "metadata": {"name": "x"}}):
        fail("selftest: an unknown kind was accepted")
    print(f"selftest: {passed} bad manifests refused, 4 good ones accepted")


# ---------------------------------------------------------------- user ids

def image_user(image):
    out = subprocess.run(["docker", "image", "inspect", "-f", "{{.Config.User}}", image], capture_output=True, text=True)
    if out.returncode != 0:
        fail(f"no image {image}: {out.stderr.strip()}")
    user = out.stdout.strip()
    # A name: look its id up in the image's own /etc/passwd.
    if user and not user.split(":")[0].isdigit():
        out = subprocess.run(["docker", "run", "--rm", "--entrypoint", "id", image, "-u", user.split(":")[0]],
                             capture_output=True, text=True)
        if out.returncode != 0:
            fail(f"{image}: cannot resolve user {user}: {out.stderr.strip()}")
        return int(out.stdout.strip())
    return int(user.split(":")[0]) if user else 0


def image_map():
    """Manifest image names -> the local tags docker/ci.sh builds (IMAGE_PREFIX, IMAGE_TAG)."""
    prefix = os.environ.get("IMAGE_PREFIX", "valkey-queue-ci")
    tag = os.environ.get("IMAGE_TAG", "test")

    def local(image):
        name = image.rsplit(":", 1)[0].split("/")[-1]
        return f"{prefix}/{name}:{tag}"
    return local


def workloads(docs):
    return [d for d in docs if d["kind"] in ("Deployment", "StatefulSet")]


def user_ids():
    local = image_map()
    checked = 0
    for overlay in VARIANTS:
        for w in workloads(render(overlay)):
            pod = w["spec"]["template"]["spec"]
            for c in pod["containers"]:
                sc = {**pod.get("securityContext", {}), **c.get("securityContext", {})}
                want = sc.get("runAsUser")
                if want is None or not sc.get("runAsNonRoot"):
                    fail(f"{overlay} {w['metadata']['name']}/{c['name']}: no runAsUser with runAsNonRoot")
                got = image_user(local(c["image"]))
                if got != want:
                    fail(f"{overlay} {w['metadata']['name']}/{c['name']}: image {local(c['image'])} runs as "
                         f"uid {got}, the manifest says runAsUser {want}")
                checked += 1
                print(f"user-ids: {overlay} {w['metadata']['name']}: image {local(c['image'])} uid {got} == runAsUser {want}")
    print(f"user-ids: {checked} containers, each image's user is its runAsUser")


def main():
    if len(sys.argv) < 2:
        print(__doc__)
        sys.exit(2)
    cmd, args = sys.argv[1], sys.argv[2:]
    if cmd == "sync":
        sync()
    elif cmd == "drift":
        drift()
    elif cmd == "render":
        print(yaml.safe_dump_all(render(args[0]), sort_keys=False))
    elif cmd == "validate":
        validate()
    elif cmd == "selftest":
        selftest()
    elif cmd == "user-ids":
        user_ids()
    elif cmd == "play":
        import kubelet
        kubelet.play(args[0], render(args[0]), image_map(), args[1:])
    else:
        print(__doc__)
        sys.exit(2)


if __name__ == "__main__":
    main()
