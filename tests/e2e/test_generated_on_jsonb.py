"""Generated site lives: hypothesis picks a sequence of Plone actions, both sites on JsonbStorage
(stock ZCatalog, the oracle, and the connector) get each action, and after each one every query is
asked of both, as anonymous and three users, and the answers must be equal.

Actions: create (Document, Folder, News Item; ids with spaces, ``%``, ``_``, non-ASCII), edit
title and subjects, workflow state, local roles, rename, move, copy, delete, expiry, reorder.
Targets are picked by index into the (identical) trees of the two sites. Titles are unique, so
no sort has ties whose order ZCatalog leaves undefined. Examples per run: the hypothesis profile's
count / 40 (ci: 5, nightly: 75).
"""

from __future__ import annotations

import pytest
from DateTime import DateTime
from hypothesis import HealthCheck, event, given
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st
from plone import api
from plone.restapi.search.handler import SearchHandler

from tests.connector.sites import CONNECTED, SITES, STOCK, on_site
from tests.connector.test_differential_plone import rows

pytestmark = [pytest.mark.slow, pytest.mark.plone]

ROOT = "gen"
VIEWERS = (None, "member", "editor", "manager")
WORDS = ("alpha", "beta", "gamma", "delta")
IDS = ("doc", "a b", "x%y", "u_v", "né")
SUBJECTS = ("red", "blue", "green")
KINDS = ("Document", "Folder", "News Item")
STATES = ("published", "private", "pending")
ACTIONS = ("create", "create", "create", "edit", "state", "state", "share", "rename", "move", "copy",
           "delete", "expire", "reorder")

actions = st.lists(
    st.tuples(
        st.sampled_from(ACTIONS),
        st.integers(0, 10_000),  # the target
        st.integers(0, 10_000),  # a second pick: destination, id
        st.sampled_from(WORDS),
        st.frozensets(st.sampled_from(SUBJECTS)),
        st.sampled_from(KINDS),
        st.sampled_from(STATES),
    ),
    min_size=3,
    max_size=9,
)


def tree(site) -> list[str]:
    """Paths below the site of the test root and everything in it, in a stable order."""
    found = []

    def walk(obj, path):
        found.append(path)
        for child_id in obj.objectIds():
            child = obj[child_id]
            if hasattr(child, "reindexObject"):
                walk(child, f"{path}/{child_id}")

    walk(site[ROOT], ROOT)
    return sorted(found)


def resolve(site, path: str):
    return site.unrestrictedTraverse(path)


def retitle(obj, suffix: str) -> None:
    """Copies repeat their originals' titles; make them unique again (no ties in title sorts)."""
    obj.title = f"{obj.title} {suffix}"
    obj.reindexObject()
    for child in obj.objectValues():
        if hasattr(child, "reindexObject"):
            retitle(child, suffix)


def apply(site, action, step: int) -> None:
    name, pick, second, word, subjects, kind, state = action
    paths = tree(site)
    items = paths[1:]  # never the test root itself, except for workflow changes
    folders = [p for p in paths if resolve(site, p).isPrincipiaFolderish]
    if name == "create":
        parent = resolve(site, folders[pick % len(folders)])
        api.content.create(container=parent, type=kind, id=f"{IDS[second % len(IDS)]}{step}",
                           title=f"{word} {kind.lower()} {step}", subject=tuple(sorted(subjects)))
        return
    if name == "state":
        obj = resolve(site, paths[pick % len(paths)])
        if api.content.get_state(obj) != state:
            api.content.transition(obj, to_state=state)
        return
    if not items:
        return
    target_path = items[pick % len(items)]
    obj = resolve(site, target_path)
    if name == "edit":
        obj.title = f"{word} edited {step}"
        obj.setSubject(tuple(sorted(subjects)))
        obj.reindexObject()
    elif name == "share":
        user = ("member", "editor")[second % 2]
        api.user.grant_roles(username=user, obj=obj, roles=["Reader"])
        obj.reindexObjectSecurity()
    elif name == "rename":
        api.content.rename(obj=obj, new_id=f"{IDS[second % len(IDS)]}{step}r")
    elif name in ("move", "copy"):
        parent_path = target_path.rsplit("/", 1)[0]
        allowed = [f for f in folders if f != target_path and not f.startswith(target_path + "/")
                   and (name == "copy" or f != parent_path)]
        if not allowed:
            return
        destination = resolve(site, allowed[second % len(allowed)])
        if name == "move":
            api.content.move(source=obj, target=destination)
        else:
            retitle(api.content.copy(source=obj, target=destination, id=f"copy{step}"), f"copy {step}")
    elif name == "delete":
        api.content.delete(obj=obj)
    elif name == "expire":
        obj.setExpirationDate(DateTime() + (1 if second % 2 else -1))
        obj.reindexObject()
    elif name == "reorder":
        obj.aq_parent.moveObjectsToTop([obj.getId()])


def queries(site) -> list[tuple[str, dict, bool]]:
    base = "/".join(site.getPhysicalPath()) + "/" + ROOT
    deepest = max((p for p in tree(site) if resolve(site, p).isPrincipiaFolderish), key=lambda p: (p.count("/"), p))
    return [
        ("subtree", {"path": base, "sort_on": "sortable_title"}, True),
        ("contents", {"path": {"query": base, "depth": 1}, "sort_on": "getObjPositionInParent"}, True),
        ("deepest contents", {"path": {"query": f"/{site.getId()}/{deepest}", "depth": 1},
                              "sort_on": "getObjPositionInParent"}, True),
        ("published", {"path": base, "review_state": "published", "sort_on": "sortable_title"}, True),
        ("not private", {"path": base, "review_state": {"not": "private"}}, False),
        ("subject or", {"path": base, "Subject": ["red", "blue"], "sort_on": "sortable_title"}, True),
        ("subject and", {"path": base, "Subject": {"query": ["red", "green"], "operator": "and"}}, False),
        *((f"text {word}", {"path": base, "SearchableText": word}, False) for word in WORDS),
        ("text glob", {"path": base, "SearchableText": "gam*"}, False),
        ("folders", {"path": base, "is_folderish": True, "sort_on": "sortable_title", "sort_order": "reverse"}, True),
        ("batched", {"path": base, "sort_on": "sortable_title", "b_start": 2, "b_size": 3}, True),
        ("navtree", {"path": {"query": f"/{site.getId()}/{deepest}", "navtree": True}, "sort_on": "sortable_title"},
         True),
    ]


def answers(name: str, user: str | None) -> dict:
    found = {}
    with on_site(name, user=user, commit=False) as site:
        prefix = "/" + ROOT
        for label, query, ordered in queries(site):
            brains = site.portal_catalog(**query)
            # navtree also lists the site's top level, where other test modules keep their content
            found[label] = [row for row in rows(site, brains, ordered) if row[0].startswith(prefix)]
            if label != "navtree":
                found[label] = (found[label], brains.actual_result_count)
        search = SearchHandler(site, site.REQUEST).search(
            {"path": "/".join(site.getPhysicalPath()) + prefix, "sort_on": "sortable_title",
             "metadata_fields": ["Subject", "review_state"]})
        found["@search"] = (search["items_total"], [
            (item["title"], item.get("review_state"), item.get("Subject")) for item in search["items"]])
    return found


def on_both(action) -> str | None:
    """Apply ``action`` to both sites, each in its own transaction; return the refusal, if any."""
    outcomes = []
    for name in SITES:
        try:
            with on_site(name) as site:
                action(site)
            outcomes.append(None)
        except Exception as error:  # the same refusal (e.g. a workflow path) must come from both
            outcomes.append(type(error).__name__)
    assert outcomes[0] == outcomes[1], outcomes
    return outcomes[0]


def assert_same_answers(step: str) -> None:
    for user in VIEWERS:
        stock, connected = answers(STOCK, user), answers(CONNECTED, user)
        for label in stock:
            assert connected[label] == stock[label], f"{step}: {label!r} as {user or 'anonymous'}"


def remove_root(site) -> None:
    if ROOT in site.objectIds():
        api.content.delete(obj=site[ROOT])


@hypothesis_settings(
    max_examples=max(2, hypothesis_settings.default.max_examples // 40),
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    deadline=None,
)
@given(steps=actions)
def test_generated_site_lives_answer_alike(plone_sites, steps):
    on_both(remove_root)
    try:
        on_both(lambda site: api.content.create(container=site, type="Folder", id=ROOT, title="Generated"))
        for number, action in enumerate(steps):
            refused = on_both(lambda site, action=action, number=number: apply(site, action, number))
            event(f"{action[0]}: {refused or 'done'}")
            trees = []
            for name in SITES:
                with on_site(name, commit=False) as site:
                    trees.append(tree(site))
            assert trees[0] == trees[1]
            assert_same_answers(f"step {number}: {action}")
    finally:
        on_both(remove_root)
