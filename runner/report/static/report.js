(() => {
  const form = document.getElementById("filters");
  const keys = Array.from(form.querySelectorAll("select"), (select) => select.name);
  // A row matches a filter on its own value (data-KEY), or on one of the values of its
  // columns (data-any-KEY, space-separated: the pivot's rows span backends and verdicts).
  function matches(row, key) {
    const wanted = form.elements[key].value;
    if (!wanted) return true;
    if (row.dataset[key] !== undefined) return row.dataset[key] === wanted;
    const any = row.dataset[`any${key[0].toUpperCase()}${key.slice(1)}`];
    return any === undefined || any.split(" ").includes(wanted);
  }
  function apply() {
    const rows = document.querySelectorAll("[data-filter]");
    let shown = 0;
    for (const row of rows) {
      const keep = keys.every((key) => matches(row, key));
      row.hidden = !keep;
      shown += keep ? 1 : 0;
    }
    const folded = document.querySelectorAll("[data-fold]:not([data-filled])").length;
    document.getElementById("shown").textContent =
      `${shown} of ${rows.length} rows shown` + (folded ? "; folded rows load when opened" : "");
  }
  form.addEventListener("change", apply);
  document.getElementById("clear").addEventListener("click", () => {
    for (const key of keys) form.elements[key].value = "";
    apply();
  });

  // Folded rows live in the data file beside the page (the body's data-data-file): loaded
  // once, when a fold is first opened, and each fold's rows inserted when that fold is.
  const bodies = document.querySelectorAll("[data-fold]");
  const file = document.body.dataset.dataFile;
  let loading = null;
  function load() {
    loading ??= new Promise((resolve, reject) => {
      const script = document.createElement("script");
      script.src = file;
      script.onload = () => {
        const data = window.REPORT_DATA;
        if (data?.build === document.body.dataset.build) resolve(data);
        else reject(new Error(`${file} beside this page belongs to another build of it`));
      };
      script.onerror = () => reject(new Error(`${file} beside this page did not load`));
      document.head.append(script);
    }).catch((error) => {
      for (const body of bodies) {
        body.closest("details").querySelector("summary").append(` (${error.message})`);
      }
      return null;
    });
    return loading;
  }
  function fill(body, data) {
    if (!data || body.dataset.filled !== undefined) return;
    body.innerHTML = data.folds[body.dataset.fold];  // markup the report rendered and escaped
    body.dataset.filled = "";
    apply();
  }
  for (const body of bodies) {
    const fold = body.closest("details");
    fold.addEventListener("toggle", () => fold.open && load().then((data) => fill(body, data)));
  }
  // A link to a row that is still folded away: load the folds, open its fold, go there.
  function reveal(id) {
    const target = document.getElementById(id);
    if (!target) return;
    for (let fold = target.closest("details"); fold; fold = fold.parentElement.closest("details")) {
      fold.open = true;
    }
    target.scrollIntoView();
  }
  document.addEventListener("click", (event) => {
    const link = event.target.closest('a[href^="#"]');
    const id = link && decodeURIComponent(link.hash.slice(1));
    if (!id || document.getElementById(id)) return;
    event.preventDefault();
    history.pushState(null, "", link.hash);
    find(id);
  });
  // The data file names the fold that holds each folded row's id.
  function find(id) {
    load().then((data) => {
      const fold = data && Object.hasOwn(data.anchors, id) ? data.anchors[id] : null;
      for (const body of bodies) {
        if (body.dataset.fold === fold) fill(body, data);
      }
      reveal(id);
    });
  }
  const wanted = decodeURIComponent(location.hash.slice(1));
  if (wanted && !document.getElementById(wanted)) find(wanted);
  apply();
})();
