"""The extension's values <-> its protobuf messages (``proto/rampart/links/v1/links.proto``).

Kept beside the extension rather than in :mod:`services.common.wire`, which converts the core
contracts only: the core's converters call these for the one optional field each message has.
"""

from __future__ import annotations

from collections.abc import Mapping

from rampart.links.v1 import links_pb2

from services.retrieval.links.options import NO_LINKS, LinkOptions


def options_to_pb(o: LinkOptions) -> links_pb2.LinkOptions | None:
    """``SearchRequest.links``: ``None`` (left unset) when nothing is asked, as for a generic tenant."""
    if o == NO_LINKS:
        return None
    return links_pb2.LinkOptions(seeds=o.seeds, head=o.head, backlinks=o.backlinks, copy_leads=o.copy_leads)


def options_from_pb(m: links_pb2.LinkOptions | None) -> LinkOptions:
    """The options a request carries; an out-of-range value is INVALID_ARGUMENT naming it."""
    if m is None:
        return NO_LINKS
    return LinkOptions(seeds=m.seeds, head=m.head, backlinks=m.backlinks, copy_leads=m.copy_leads)


def leads_to_pb(leads: Mapping[str, list[str]]) -> dict[str, links_pb2.CopyLeads]:
    """``SearchResponse.copy_leads``: a hit's chunk id -> the opening names of its closest copies."""
    return {chunk_id: links_pb2.CopyLeads(names=names) for chunk_id, names in leads.items()}


def leads_from_pb(leads: Mapping[str, links_pb2.CopyLeads]) -> dict[str, list[str]]:
    return {chunk_id: list(c.names) for chunk_id, c in leads.items()}
