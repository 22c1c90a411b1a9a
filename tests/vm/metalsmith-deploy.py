#!/usr/bin/env python3
"""Deploy (and optionally undeploy) one node through metalsmith's Python API.

What a metalsmith user does, against a standalone Bare Metal API (no Keystone, no
Neutron, no Glance, no Swift):

  1. reserve_node: an allocation (POST /v1/allocations) for the resource class, limited
     to --candidate nodes when given, named after --hostname when given;
  2. provision_node: instance_info (image_source, image_checksum = the sha256,
     image_disk_format, capabilities.boot_option = local, display_name), then
     GET /v1/nodes/{node}/validate, then PUT /v1/nodes/{node}/states/provision
     {"target": "active", "configdrive": {"meta_data": ..., "user_data": ...}}, the
     config drive as JSON (metalsmith.instance_config.GenericConfig);
  3. wait_for_provisioning until the node is active (bounded by --timeout);
  4. with --undeploy: unprovision_node (target "deleted"; the allocation goes with the
     instance) and a bounded wait until the node is available again.

No NICs are requested (nics=[]), so metalsmith creates and attaches no Neutron port and
sends no network_data; nothing here reads metalsmith's Instance.to_dict() or
ip_addresses(), which would list Neutron ports.

Run it with the python of the venv that has metalsmith (tested with metalsmith 2.5.0,
openstacksdk 4.22.0):

  $VENV/bin/python tests/vm/metalsmith-deploy.py --endpoint http://127.0.0.1:6385 \
      --resource-class baremetal --candidate vm-1 \
      --image http://10.0.2.2:8080/disk.raw --sha256 HEX --hostname vm-1 \
      --timeout 900 --undeploy

Output on stdout: one JSON line after the deploy ({"event": "deployed", "state":
"active", "node_uuid": ..., ...}) and, with --undeploy, one more ({"event":
"undeployed", "provision_state": "available", ...}). Progress and errors go to stderr.
Exit codes: 0 success, 1 failure (with the reason on stderr), 2 bad arguments.
"""

import argparse
import json
import logging
import re
import sys
import time

LOG = logging.getLogger("metalsmith-deploy")


def fail(msg, code=1):
    print("metalsmith-deploy: error: %s" % msg, file=sys.stderr)
    sys.exit(code)


def parse_args(argv):
    p = argparse.ArgumentParser(
        description="Deploy a node with metalsmith against a standalone Ironic (no auth)")
    p.add_argument("--endpoint", required=True,
                   help="Bare Metal API root, e.g. http://127.0.0.1:6385")
    p.add_argument("--resource-class", required=True, help="resource class to allocate from")
    p.add_argument("--candidate", action="append", default=[], metavar="NODE",
                   help="candidate node (name or UUID); repeatable")
    p.add_argument("--trait", action="append", default=[], metavar="TRAIT",
                   help="required trait (the allocation's traits, copied to instance_info.traits); "
                        "repeatable")
    p.add_argument("--image", required=True, help="HTTP(S) URL of a whole-disk image")
    p.add_argument("--sha256", help="SHA256 of the image (64 hex digits)")
    p.add_argument("--checksum-url",
                   help="URL of a sha256sum-style file listing the image by its file name "
                        "(metalsmith downloads it from here); with --sha256 too, the two must agree")
    p.add_argument("--disk-format", default=None,
                   help="instance_info image_disk_format (default: raw when the URL ends in .raw)")
    p.add_argument("--hostname", help="instance hostname (the allocation's name)")
    p.add_argument("--ssh-key", action="append", default=[], metavar="FILE",
                   help="public key file put into the config drive's meta_data; repeatable")
    p.add_argument("--user-data", metavar="FILE", help="user data file for the config drive")
    p.add_argument("--timeout", type=int, default=1800,
                   help="seconds to wait for each of deploy and undeploy (default 1800)")
    p.add_argument("--undeploy", action="store_true",
                   help="after the deploy, unprovision and wait for available")
    p.add_argument("--pause-before-undeploy", action="store_true",
                   help="with --undeploy: after the deploy line, wait for a line on "
                        "standard input (or its end) before undeploying, so that the "
                        "caller can look at the running instance first")
    p.add_argument("--api-version", default=None,
                   help="pin the baremetal API microversion (default: negotiated)")
    p.add_argument("--debug", action="store_true", help="log every HTTP request")
    args = p.parse_args(argv)
    if not re.match(r"^https?://", args.image):
        p.error("--image must be an http:// or https:// URL")
    if args.sha256 is None and args.checksum_url is None:
        p.error("one of --sha256 and --checksum-url is required")
    if args.sha256 is not None:
        if not re.fullmatch(r"[0-9a-fA-F]{64}", args.sha256):
            p.error("--sha256 must be 64 hexadecimal digits")
        args.sha256 = args.sha256.lower()
    if args.timeout <= 0:
        p.error("--timeout must be positive")
    if args.disk_format is None and args.image.split("?")[0].endswith(".raw"):
        args.disk_format = "raw"
    return args


def connect(endpoint, api_version):
    """An openstacksdk connection to a standalone Ironic: no Keystone, no catalog."""
    import openstack

    endpoint = endpoint.rstrip("/")
    kwargs = dict(
        auth_type="none",
        # keystoneauth's "none" plugin: the session's endpoint (unversioned root).
        auth={"endpoint": endpoint},
        # The baremetal proxy goes there instead of looking up a service catalog.
        baremetal_endpoint_override=endpoint,
        # Only the Bare Metal service exists.
        has_compute=False,
        has_image=False,
        has_network=False,
        has_object_store=False,
        region_name="RegionOne",
    )
    if api_version:
        kwargs["baremetal_api_version"] = api_version
    return openstack.connect(**kwargs)


def node_summary(conn, node_id):
    node = conn.baremetal.get_node(node_id)
    return node, {
        "node_uuid": node.id,
        "node_name": node.name,
        "provision_state": node.provision_state,
        "power_state": node.power_state,
        "allocation_uuid": node.allocation_id,
        "instance_uuid": node.instance_id,
        "last_error": node.last_error,
    }


def node_state(conn, node, exc):
    """ " (node X: provision_state S, last_error E)" for an error message, the
    last_error left out when the message already has it."""
    if node is None:
        return ""
    try:
        _, s = node_summary(conn, node.id)
    except Exception:  # noqa: BLE001 - best effort, the error is reported anyway
        return ""
    text = " (node %s: provision_state %s" % (s["node_uuid"], s["provision_state"])
    if s["last_error"] and s["last_error"] not in str(exc):
        text += ", last_error %s" % s["last_error"]
    return text + ")"


def emit(obj):
    sys.stdout.write(json.dumps(obj, sort_keys=True) + "\n")
    sys.stdout.flush()


def main(argv=None):
    args = parse_args(sys.argv[1:] if argv is None else argv)
    logging.basicConfig(
        level=logging.DEBUG if args.debug else logging.INFO, stream=sys.stderr,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    if not args.debug:
        # openstacksdk logs each request at DEBUG; keep its INFO noise down too.
        logging.getLogger("keystoneauth").setLevel(logging.WARNING)
        logging.getLogger("openstack").setLevel(logging.WARNING)
        logging.getLogger("urllib3").setLevel(logging.WARNING)

    try:
        import metalsmith
        from metalsmith import exceptions as ms_exc
        from metalsmith import instance_config, sources
        from openstack import exceptions as os_exc
    except ImportError as exc:
        fail("metalsmith is not importable (%s): run this with the python of the venv "
             "where `pip install metalsmith` was done" % exc)

    ssh_keys = []
    for path in args.ssh_key:
        try:
            with open(path) as fp:
                ssh_keys.append(fp.read().strip())
        except OSError as exc:
            fail("cannot read --ssh-key %s: %s" % (path, exc), 2)
    user_data = None
    if args.user_data:
        try:
            with open(args.user_data) as fp:
                user_data = fp.read()
        except OSError as exc:
            fail("cannot read --user-data %s: %s" % (args.user_data, exc), 2)

    # The image: metalsmith 2.x takes one of checksum= (a sha256, sent as
    # instance_info.image_checksum) or checksum_url= (it downloads the file and picks
    # the line of the image's file name, then sends the same image_checksum).
    try:
        if args.checksum_url:
            image = sources.HttpWholeDiskImage(
                args.image, checksum_url=args.checksum_url, disk_format=args.disk_format)
        else:
            image = sources.HttpWholeDiskImage(
                args.image, checksum=args.sha256, disk_format=args.disk_format)
    except TypeError as exc:
        fail("metalsmith refused the image arguments: %s" % exc, 2)
    if args.checksum_url:
        # Resolve the checksum now (what provision_node would do) so that a mismatch
        # with --sha256 stops us before anything is reserved.
        try:
            image._validate(None, None)
        except ms_exc.InvalidImage as exc:
            fail(str(exc))
        if args.sha256 and image.checksum.lower() != args.sha256:
            fail("the checksum file %s gives %s for the image, not --sha256 %s"
                 % (args.checksum_url, image.checksum, args.sha256))
        LOG.info("checksum from %s: %s", args.checksum_url, image.checksum)

    config = instance_config.GenericConfig(ssh_keys=ssh_keys, user_data=user_data)

    try:
        conn = connect(args.endpoint, args.api_version)
        provisioner = metalsmith.Provisioner(cloud_region=conn.config)
        conn = provisioner.connection
        # Fail early with a clear message when the endpoint does not answer.
        conn.baremetal.get_endpoint()
        version = conn.baremetal.get_api_major_version()
        LOG.info("Bare Metal API at %s, major version %s", args.endpoint, version)
    except Exception as exc:  # noqa: BLE001 - any failure here is "cannot connect"
        fail("cannot reach the Bare Metal API at %s: %s" % (args.endpoint, exc))

    start = time.monotonic()
    node = None
    try:
        LOG.info("reserving a node: resource class %s, candidates %s, traits %s, hostname %s",
                 args.resource_class, args.candidate or "any", args.trait, args.hostname)
        node = provisioner.reserve_node(
            resource_class=args.resource_class,
            candidates=args.candidate or None,
            traits=args.trait or None,
            hostname=args.hostname)
        LOG.info("reserved node %s (%s), allocation %s",
                 node.id, node.name, node.allocation_id)

        LOG.info("provisioning node %s with %s", node.id, args.image)
        instance = provisioner.provision_node(
            node, image=image, nics=[], config=config, hostname=args.hostname)
        LOG.info("waiting up to %ss for node %s to become active", args.timeout, node.id)
        instance = provisioner.wait_for_provisioning([node.id], timeout=args.timeout)[0]
    except ms_exc.Error as exc:
        fail("deploy failed: %s: %s%s" % (type(exc).__name__, exc, node_state(conn, node, exc)))
    except os_exc.SDKException as exc:
        fail("deploy failed, API error: %s" % exc)

    n, summary = node_summary(conn, instance.uuid)
    if n.provision_state != "active":
        fail("after the wait node %s is %s, not active" % (n.id, n.provision_state))
    emit(dict(summary, event="deployed", state=instance.state.value,
              hostname=instance.hostname,
              seconds=round(time.monotonic() - start, 1)))

    if not args.undeploy:
        return 0
    if args.pause_before_undeploy:
        LOG.info("deployed; waiting for a line on standard input to undeploy")
        sys.stdin.readline()

    start = time.monotonic()
    try:
        LOG.info("unprovisioning node %s, waiting up to %ss for available",
                 n.id, args.timeout)
        provisioner.unprovision_node(n.id, wait=args.timeout)
    except ms_exc.Error as exc:
        fail("undeploy failed: %s: %s%s" % (type(exc).__name__, exc, node_state(conn, n, exc)))
    except os_exc.SDKException as exc:
        fail("undeploy failed, API error: %s" % exc)

    n, summary = node_summary(conn, n.id)
    if n.provision_state != "available":
        fail("after the wait node %s is %s, not available" % (n.id, n.provision_state))
    if n.allocation_id or n.instance_id:
        fail("node %s is available but still has allocation %s / instance %s"
             % (n.id, n.allocation_id, n.instance_id))
    emit(dict(summary, event="undeployed", seconds=round(time.monotonic() - start, 1)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
