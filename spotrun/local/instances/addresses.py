"""Each simulated instance's private IPv4: a loopback address of its own, ``127.0.0.k``.

On EC2 every instance has its own private IPv4 address in its subnet, and a multi-node job's processes reach each
other there: torchrun's rendezvous endpoint and ``--local-addr``, then gloo or NCCL. On Linux the whole of
``127.0.0.0/8`` is routed to the loopback interface, so every address in it reaches this machine: giving each
instance its own ``127.0.0.k`` lets one node's processes listen on their own address and another's connect to it,
as between instances. EC2's DescribeInstances (``PrivateIpAddress``) and the instance's IMDS (``local-ipv4``) both
answer with it.

``127.0.0.1`` is left to the emulator's own servers (moto, the API stand-in, every IMDS), and addresses ending in
``.0`` or ``.255`` are skipped so that none looks like a network or broadcast address. Addresses are handed out in
turn rather than lowest first, so a replacement does not take the address a node just left while a peer may still
hold connections to it.
"""

from __future__ import annotations

import contextlib
import ipaddress
import itertools
import threading
from collections.abc import Iterator
from typing import Any

LOOPBACK = ipaddress.IPv4Network("127.0.0.0/8")
FIRST = ipaddress.IPv4Address("127.0.0.2")


def _usable(address: ipaddress.IPv4Address) -> bool:
    last = int(address) & 0xFF
    return address >= FIRST and last not in (0, 255) and address != LOOPBACK.broadcast_address


class LoopbackAddresses:
    """Distinct loopback addresses for the live instances of one runtime."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._held: dict[str, str] = {}  # instance id -> address
        self._next = int(FIRST)

    def take(self, instance_id: str) -> str:
        """Give ``instance_id`` an address no other live instance holds (the same one if it already has one).

        Raises
        ------
        RuntimeError
            When every usable address of ``127.0.0.0/8`` is held (some sixteen million instances).
        """
        with self._lock:
            if instance_id in self._held:
                return self._held[instance_id]
            held = set(self._held.values())
            for address in self._candidates():
                if str(address) not in held:
                    self._next = int(address) + 1
                    self._held[instance_id] = str(address)
                    return str(address)
        raise RuntimeError("every loopback address is held by a live instance")

    def _candidates(self) -> Iterator[ipaddress.IPv4Address]:
        top = int(LOOPBACK.broadcast_address)
        for value in itertools.chain(range(self._next, top), range(int(FIRST), self._next)):
            address = ipaddress.IPv4Address(value)
            if _usable(address):
                yield address

    def release(self, instance_id: str) -> None:
        """Free the address of ``instance_id`` (idempotent): a later instance may get it."""
        with self._lock:
            self._held.pop(instance_id, None)

    def of(self, instance_id: str) -> str | None:
        """The address ``instance_id`` holds, if any."""
        with self._lock:
            return self._held.get(instance_id)


def give_private_ip(model: Any, address: str) -> None:
    """Make ``address`` the private IPv4 of moto's instance record ``model`` and of its primary interface.

    moto took an address of the instance's subnet (``Subnet.get_available_subnet_ip``); it is given back to the
    subnet, and the primary interface's address, its list of private addresses and its private DNS name name
    ``address`` instead, so DescribeInstances and DescribeNetworkInterfaces report it.
    """
    nic = model.nics[0]
    old = nic.private_ip_address
    if old and old != address:
        with contextlib.suppress(Exception):  # moto's own cleanup on delete tolerates a missing subnet too
            model.ec2_backend.get_subnet(model.subnet_id).del_subnet_ip(old)
        model._private_ips.discard(old)
    nic.private_ip_address = address
    addresses = [dict(entry) for entry in nic.private_ip_addresses]
    primary = next((e for e in addresses if e.get("Primary") or e.get("PrivateIpAddress") == old), None)
    if primary is None:
        addresses.insert(0, {"Primary": True, "PrivateIpAddress": address})
    else:
        primary["PrivateIpAddress"] = address
    dns = f"ip-{address.replace('.', '-')}.ec2.internal"
    if getattr(nic, "private_dns_name", None):
        nic.private_dns_name = dns
        for entry in addresses:
            if entry.get("Primary"):
                entry["PrivateDnsName"] = dns
    nic.private_ip_addresses = addresses
