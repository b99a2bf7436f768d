// The demo search page: plain DOM, the service's public routes on the same origin.
// Every text shown is set with textContent; the only markup taken from an answer is the <mark> of a
// highlight snippet, and only after checking that a snippet holds no other tag (markedNodes).

const FACETS = ["portal_type", "review_state", "Subject"];
const FACET_TITLES = {portal_type: "Type", review_state: "State", Subject: "Subject"};
const PAGE_SIZE = 10;
const SUGGEST_DELAY = 150;
const ENTITIES = {"&amp;": "&", "&lt;": "<", "&gt;": ">", "&quot;": "\"", "&#x27;": "'", "&#39;": "'"};

const catalog = new URLSearchParams(location.search).get("catalog") || "demo";
const state = {text: "", filters: Object.fromEntries(FACETS.map(name => [name, new Set()])), start: 0};
const $ = id => document.getElementById(id);

function element(tag, props = {}, ...children) {
  const node = Object.assign(document.createElement(tag), props);
  node.append(...children);
  return node;
}

function authorization() {
  const token = $("token").value.trim();
  return token ? {Authorization: "Bearer " + token} : {};
}

async function getJSON(url, options = {}) {
  const response = await fetch(url, {...options, headers: {Accept: "application/json", ...authorization()}});
  const body = await response.json().catch(() => ({}));
  if (!response.ok) throw new Error(body.detail || body.title || "HTTP " + response.status);
  return body;
}

// A snippet of the service: escaped text with <mark>...</mark> around matched words. Anything else
// that looks like a tag (which the service never sends) refuses the snippet, and the caller shows
// plain text instead. The nodes are built, never parsed as HTML.
export function markedNodes(snippet) {
  if (typeof snippet !== "string" || /[<>]/.test(snippet.replace(/<\/?mark>/g, ""))) return null;
  const nodes = [];
  let open = false;
  for (const part of snippet.split(/(<\/?mark>)/)) {
    if (part === "<mark>") open = true;
    else if (part === "</mark>") open = false;
    else if (part) {
      const text = part.replace(/&(amp|lt|gt|quot|#x27|#39);/g, entity => ENTITIES[entity]);
      nodes.push(open ? element("mark", {textContent: text}) : document.createTextNode(text));
    }
  }
  return nodes;
}

function highlighted(tag, className, snippet, plain) {
  const nodes = snippet === undefined ? null : markedNodes(snippet);
  if (nodes) return element(tag, {className}, ...nodes);
  return plain ? element(tag, {className, textContent: String(plain)}) : null;
}

function searchQuery() {
  const query = {};
  if (state.text) query.SearchableText = state.text;
  for (const [name, values] of Object.entries(state.filters)) {
    if (values.size) query[name] = [...values];
  }
  if (!state.text) Object.assign(query, {sort_on: "sortable_title"});
  return query;
}

async function search() {
  const params = new URLSearchParams({catalog, q: JSON.stringify(searchQuery()), b_size: PAGE_SIZE,
                                      b_start: state.start, facets: FACETS.join(","), highlight: "true",
                                      typo: "true"});
  for (const field of ["Title", "Description", "portal_type", "review_state", "Subject"]) {
    params.append("metadata", field);
  }
  $("status").textContent = "searching…";
  try {
    const answer = await getJSON("/search?" + params);
    renderResults(answer);
    renderFacets(answer.facets || {});
    renderDidYouMean(answer.did_you_mean);
    renderPager(answer);
  } catch (error) {
    $("status").textContent = "search failed: " + error.message;
  }
}

function renderResults(answer) {
  const shown = answer.items.length;
  $("status").textContent = answer.items_total
    ? `${answer.items_total} ${answer.items_total === 1 ? "result" : "results"}, ${answer.b_start + 1}–${answer.b_start + shown}`
    : "no results";
  const items = answer.items.map(item => {
    const meta = item.metadata || {};
    const marks = item.highlight || {};
    const title = highlighted("div", "title", marks.Title, meta.Title || item.path);
    const facts = [meta.portal_type, meta.review_state, item.path, item.corrected ? "corrected" : null];
    return element("li", {}, title,
                   element("div", {className: "meta", textContent: facts.filter(Boolean).join(" · ")}),
                   ...[highlighted("p", "description", marks.Description, meta.Description),
                       highlighted("p", "snippet", marks.SearchableText, "")].filter(Boolean));
  });
  $("results").replaceChildren(...items);
}

function renderFacets(facets) {
  const groups = FACETS.filter(name => facets[name]).map(name => {
    const chosen = state.filters[name];
    const counted = facets[name].values.map(entry => String(entry.value));
    // A chosen value that no longer counts stays visible, so it can be unchosen.
    const rows = [...facets[name].values, ...[...chosen].filter(v => !counted.includes(v)).map(v => ({value: v, count: 0}))];
    const labels = rows.map(({value, count}) => {
      const box = element("input", {type: "checkbox", checked: chosen.has(String(value))});
      box.dataset.facet = name;
      box.dataset.value = String(value);
      box.addEventListener("change", () => {
        if (box.checked) chosen.add(String(value)); else chosen.delete(String(value));
        state.start = 0;
        search();
      });
      return element("label", {}, box, element("span", {textContent: String(value)}),
                     element("span", {className: "count", textContent: String(count)}));
    });
    return element("fieldset", {}, element("legend", {textContent: FACET_TITLES[name]}), ...labels);
  });
  $("facets").replaceChildren(...groups);
}

function renderDidYouMean(suggestion) {
  const box = $("did-you-mean");
  box.hidden = !suggestion;
  if (!suggestion) return box.replaceChildren();
  const link = element("button", {type: "button", className: "link", textContent: suggestion});
  link.addEventListener("click", () => { $("q").value = suggestion; submit(); });
  box.replaceChildren("Did you mean ", link, "?");
}

function renderPager(answer) {
  const pages = Math.max(1, Math.ceil(answer.items_total / PAGE_SIZE));
  const page = Math.floor(answer.b_start / PAGE_SIZE) + 1;
  $("pager").hidden = answer.items_total === 0;
  $("page-indicator").textContent = `page ${page} of ${pages}`;
  $("prev").disabled = page <= 1;
  $("next").disabled = page >= pages;
}

function submit() {
  closeSuggestions();
  state.text = $("q").value.trim();
  state.start = 0;
  search();
}

// -- suggestions ---------------------------------------------------------------------------
let suggestTimer = null;
let suggestSeq = 0;
let active = -1;

function suggestionItems() {
  return [...$("suggestions").children];
}

function closeSuggestions() {
  clearTimeout(suggestTimer);
  suggestSeq++;  // an answer still on its way is dropped
  active = -1;
  $("suggestions").hidden = true;
  $("suggestions").replaceChildren();
  $("q").setAttribute("aria-expanded", "false");
  $("q").removeAttribute("aria-activedescendant");
}

function choose(item) {
  const input = $("q");
  if (item.dataset.kind === "word") {
    const words = input.value.split(/\s+/);
    words[words.length - 1] = item.dataset.text;
    input.value = words.join(" ");
  } else {
    input.value = item.dataset.text;
  }
  submit();
}

function setActive(index) {
  const items = suggestionItems();
  if (!items.length) return;
  active = (index + items.length) % items.length;
  items.forEach((item, i) => item.setAttribute("aria-selected", String(i === active)));
  $("q").setAttribute("aria-activedescendant", items[active].id);
}

async function suggest() {
  const typed = $("q").value;
  if (!typed.trim()) return closeSuggestions();
  const seq = ++suggestSeq;
  let answer;
  try {
    answer = await getJSON(`/${encodeURIComponent(catalog)}/@suggest?` + new URLSearchParams({q: typed, limit: 6}));
  } catch {
    return;  // suggestions are a help; the search itself reports errors
  }
  if (seq !== suggestSeq) return;
  const entries = [...answer.words.map(w => ["word", w.word]), ...answer.titles.map(t => ["title", String(t.title)])];
  const items = entries.map(([kind, text], i) => {
    const item = element("li", {id: "suggestion-" + i, role: "option", textContent: text},
                         element("span", {className: "kind", textContent: kind}));
    Object.assign(item.dataset, {kind, text});
    item.setAttribute("aria-selected", "false");
    item.addEventListener("mousedown", event => { event.preventDefault(); choose(item); });
    return item;
  });
  active = -1;
  $("suggestions").replaceChildren(...items);
  $("suggestions").hidden = !items.length;
  $("q").setAttribute("aria-expanded", String(items.length > 0));
}

function onKey(event) {
  const open = !$("suggestions").hidden;
  if (event.key === "ArrowDown" && open) { event.preventDefault(); setActive(active + 1); }
  else if (event.key === "ArrowUp" && open) { event.preventDefault(); setActive(active - 1); }
  else if (event.key === "Escape") closeSuggestions();
  else if (event.key === "Enter" && open && active >= 0) { event.preventDefault(); choose(suggestionItems()[active]); }
}

async function demoToken() {
  $("token-status").textContent = "…";
  try {
    const answer = await getJSON("/demo-page/token?" + new URLSearchParams({catalog}), {method: "POST"});
    $("token").value = answer.token;
    $("token-status").textContent = `${answer.principals.join(", ")}, ${answer.ttl} s`;
    search();
  } catch (error) {
    $("token-status").textContent = "no token: " + error.message;
  }
}

$("catalog-name").textContent = catalog;
$("search-form").addEventListener("submit", event => { event.preventDefault(); submit(); });
$("q").addEventListener("input", () => { clearTimeout(suggestTimer); suggestTimer = setTimeout(suggest, SUGGEST_DELAY); });
$("q").addEventListener("keydown", onKey);
$("q").addEventListener("blur", () => setTimeout(closeSuggestions, 100));
$("prev").addEventListener("click", () => { state.start = Math.max(0, state.start - PAGE_SIZE); search(); });
$("next").addEventListener("click", () => { state.start += PAGE_SIZE; search(); });
$("token").addEventListener("change", search);
$("demo-token").addEventListener("click", demoToken);
search();
