// Reproduces one failing result with onnxruntime-web alone. repro.json lists the sessions to
// create, in the order the suite created them ("steps"), and each model with its inputs and
// onnxruntime CPU's outputs ("workloads"). Each run gets the inputs its workload's `schedule`
// names, in the GPU buffers the step's `buffers` say (the same ones rewritten, or a new one
// every run), on the graph (gpu_graph_id) it names when the step records several; a decoder's
// (its workload's `deviceCache`) runs its loop as the suite's page does, through the feeding both
// pages share (feeds.mjs): its prefill outside capture, then decode steps fed only token and mask
// that read the KV caches the device wrote. The last step is judged by the suite's own judge, in
// Python: Pyodide runs the bundle's judge/ (runner/scenario/bundled.py), which asks this script to
// compare tensors (`compareOutputs`).
// A scenario's bundle holds its steps instead ("scenario"): scenario.mjs, which the suite's
// page runs them with too, replays them, and the judge names the first failing step.
// Serve the folder (python3 -m http.server) and open index.html; ?faults=off runs the same
// steps without the injected fault(s) a --with-fault bundle carries.
import {TYPED_ARRAYS, feeder, loadModule, releaseEntry} from './feeds.mjs';
import {creationStatus, runScenarioSteps, runStatus, sessionName} from './scenario.mjs';

const UNIFORM = 0x40; // GPUBufferUsage.UNIFORM
const PREFILL_DRAW = -1; // a decoder's prefill's variant (runner/schedule.py)

/**
 * The session options, as the suite creates its sessions (its harness.js): the EP as an
 * object (with the layout's preferredLayout, if it names one), since the C++ EP builds pass
 * enableGraphCapture on only then; capture sessions take
 * GPU-buffer inputs and keep their outputs on the GPU. `epAsString` is the injected fault
 * ep-name-as-string: the EP named 'webgpu', which the C++ builds take without capturing.
 */
const sessionOptions = (workload, mode, epAsString, location) => ({
  executionProviders: [epAsString ? 'webgpu' : {
    name: 'webgpu',
    ...(workload.preferredLayout ? {preferredLayout: workload.preferredLayout} : {}), // its layout's
  }],
  freeDimensionOverrides: workload.sharedShape, // a decoder's prefill leaves its sequence length free
  ...(mode === 'capture' ? {enableGraphCapture: true, preferredOutputLocation: 'gpu-buffer'} : {}),
  ...(location ? {preferredOutputLocation: location} : {}), // a scenario's session says
});

const lines = [];
const say = (text) => {
  lines.push(text);
  console.log(text);
  document.getElementById('log').textContent = lines.join('\n');
};

let contextSession = null; // kept for the page's life (main)

const faultsOn = FAULTS.length > 0 && new URLSearchParams(location.search).get('faults') !== 'off';

// WebGPU calls counted per run: a replay that creates bind groups or writes uniforms did not
// replay a capture. The injected faults (faults.js) rewrite bind groups through `rewriters`.
const counts = {bindGroups: 0, uniformWrites: 0};
const rewriters = [];
const installCounters = () => {
  const createBindGroup = GPUDevice.prototype.createBindGroup;
  GPUDevice.prototype.createBindGroup = function (descriptor, ...rest) {
    counts.bindGroups++;
    for (const rewrite of rewriters) {
      descriptor = rewrite(this, descriptor);
    }
    return createBindGroup.call(this, descriptor, ...rest);
  };
  const writeBuffer = GPUQueue.prototype.writeBuffer;
  GPUQueue.prototype.writeBuffer = function (buffer, ...rest) {
    if (buffer.usage & UNIFORM) {
      counts.uniformWrites++;
    }
    return writeBuffer.call(this, buffer, ...rest);
  };
};

const fetched = new Map();
const bytes = async (path) => {
  if (!fetched.has(path)) {
    const response = await fetch(path);
    if (!response.ok) {
      throw new Error(`fetching ${path}: HTTP ${response.status}`);
    }
    fetched.set(path, await response.arrayBuffer());
  }
  return fetched.get(path);
};

const tensorFile = async (spec) => ({
  type: spec.type,
  dims: spec.dims,
  data: new TYPED_ARRAYS[spec.type](await bytes(spec.bin)),
});

const float16 = (bits) => {
  const sign = bits & 0x8000 ? -1 : 1;
  const exponent = (bits >> 10) & 0x1f;
  const fraction = bits & 0x3ff;
  if (exponent === 0) {
    return sign * 2 ** -14 * (fraction / 1024);
  }
  if (exponent === 31) {
    return fraction ? NaN : sign * Infinity;
  }
  return sign * 2 ** (exponent - 15) * (1 + fraction / 1024);
};
const numbers = (tensor) => Array.from(tensor.data, tensor.type === 'float16' ? float16 : Number);
const sameDims = (a, b) => a.length === b.length && a.every((d, i) => Number(d) === Number(b[i]));

/** The suite's rule (ORT-web's op-test rule, runner/compare.py): within `abs`, or a same-sign
 * ratio within `rel`; and how many elements are NaN or infinite where the expected ones are
 * finite. Errors are JSON: null stands for an infinite one. */
const compare = (actual, expected, tolerance) => {
  const total = expected.data.length;
  if (!actual || !sameDims(actual.dims, expected.dims)) {
    const dims = (tensor) => (tensor ? tensor.dims.map(Number) : []);
    const shapes = [dims(actual), dims(expected)];
    return {maxAbs: null, maxRel: null, mismatched: total, total, shapes, nonFinite: 0};
  }
  const a = numbers(actual);
  const e = numbers(expected);
  let [maxAbs, maxRel, mismatched, nonFinite] = [0, 0, 0, 0];
  for (let i = 0; i < total; i++) {
    const same = a[i] === e[i] || (Number.isNaN(a[i]) && Number.isNaN(e[i]));
    const finite = Number.isFinite(a[i]) && Number.isFinite(e[i]);
    const diff = same ? 0 : finite ? Math.abs(a[i] - e[i]) : Infinity;
    const big = Math.max(Math.abs(a[i]), Math.abs(e[i]));
    const small = Math.min(Math.abs(a[i]), Math.abs(e[i]));
    const ratio = same ? 1 : finite && a[i] * e[i] > 0 ? big / small : Infinity;
    const rel = same ? 0 : finite && e[i] !== 0 ? diff / Math.abs(e[i]) : diff > 0 ? Infinity : 0;
    if (!(same || diff <= tolerance.abs || ratio <= 1 + tolerance.rel)) {
      mismatched++;
    }
    if (Number.isFinite(e[i]) && !Number.isFinite(a[i])) {
      nonFinite++;
    }
    maxAbs = Math.max(maxAbs, diff);
    maxRel = Math.max(maxRel, rel);
  }
  const json = (value) => (Number.isFinite(value) ? value : null);
  return {maxAbs: json(maxAbs), maxRel: json(maxRel), mismatched, total, shapes: null, nonFinite};
};

const INTEGER = /int|bool/;

/** Each expected output compared (`exactIntegers`: integer outputs exactly). */
const compareOutputs = (actual, expected, tolerance, exactIntegers) => Object.fromEntries(
  Object.entries(expected).map(([name, want]) => [name, compare(actual[name], want,
    exactIntegers && INTEGER.test(want.type) ? {abs: 0, rel: 0} : tolerance)]));

/** The first output of `a` that `b` does not equal bit for bit, or null. */
const firstDifference = (a, b) => Object.keys(a).find((name) => {
  const x = numbers(a[name]);
  const y = b[name] ? numbers(b[name]) : [];
  return x.length !== y.length || !x.every((v, i) => Object.is(v, y[i]) || v === y[i]);
}) ?? null;

/**
 * What feeds.mjs takes for a step of `workload` (`step`: mode, buffers, graphs), as the suite
 * hands its page a case: pre-allocated outputs typed and shaped as onnxruntime CPU's, and a
 * decoder's device cache, its present caches written in place into their past caches' buffers
 * under capture, and its prefill's inputs and outputs.
 */
const feedSpec = (workload, step, sessionName) => {
  const capture = step.mode === 'capture';
  const cache = workload.deviceCache;
  const inPlace = capture && cache && Object.keys(cache.inPlace).length ? cache.inPlace : undefined;
  const prefill = workload.variants.find((variant) => variant.draw === PREFILL_DRAW);
  return {
    mode: step.mode,
    sessionName,
    graphs: step.graphs,
    buffers: step.buffers,
    inputs: workload.inputs,
    outputNames: workload.outputs,
    outputs: capture && (step.buffers.outputs !== 'none' || inPlace) ? workload.cpu : undefined,
    ...(inPlace ? {inPlace, swapped: cache.swapped} : {}),
    ...(cache ? {
      deviceCache: {
        caches: Object.fromEntries(Object.entries(cache.inPlace).map(([present, past]) => [past, present])),
        rewinds: Object.fromEntries(cache.rewinds),
      },
    } : {}),
    ...(prefill ? {prefillInputs: prefill.inputs, prefillOutputs: prefill.cpu} : {}),
  };
};

const createSession = async (ort, workload, spec) => {
  const model = new Uint8Array(await bytes(workload.model));
  const asString = spec.faults.includes('ep-name-as-string');
  const options = sessionOptions(workload, spec.mode, asString, spec.location);
  const session = await ort.InferenceSession.create(model, options);
  return {session, name: spec.sessionName, graphs: new Map(), buffers: [], tensors: []};
};

/** A failed run, numbered, and what it means (`runStatus`). */
const runFailure = (step, index, graph, error, prefill) => {
  const message = String(error && error.message ? error.message : error);
  const where = (prefill ? ', the prefill' : '') + (step.graphs > 1 ? ` (gpu_graph_id ${graph})` : '');
  return {status: runStatus(step.mode === 'capture', message), message: `run ${index + 1}${where}: ${message}`};
};

/**
 * A run's outputs as far as the model defines them, as the suite judges them (runner/workload's
 * `Workload.defined`): a decoder's present caches zeroed from its sequence length on (the ones of
 * the run's attention mask), where some builds leave another kernel's leftovers no step reads.
 */
const defined = (workload, variant, data, run) => {
  const i = variant.inputs.findIndex((input) => input.name === 'attention_mask');
  if (!workload.deviceCache || i < 0) {
    return run;
  }
  const mask = new TYPED_ARRAYS[variant.inputs[i].type](data[i]);
  const rows = variant.inputs[i].dims[0];
  const width = mask.length / rows;
  const lengths = Array.from({length: rows}, (_, row) => mask
    .slice(row * width, (row + 1) * width).reduce((sum, one) => sum + Number(one), 0));
  const masked = {...run};
  for (const name of Object.keys(workload.deviceCache.inPlace)) {
    const tensor = run[name];
    if (!tensor || tensor.dims.length !== 4 || tensor.dims[0] !== rows) {
      continue;
    }
    const [, heads, positions, head] = tensor.dims;
    const values = tensor.data.slice();
    lengths.forEach((length, row) => {
      for (let block = row * heads; block < (row + 1) * heads; block++) {
        values.fill(0, (block * positions + length) * head, (block + 1) * positions * head);
      }
    });
    masked[name] = {...tensor, data: values};
  }
  return masked;
};

/**
 * The workload's runs on a session (its `schedule`: each run's graph and inputs, fed by
 * feeds.mjs's `scheduledRun` as the suite's page feeds them), every run's outputs read back;
 * what replays (a graph's runs after its first, a prefill none) asked of WebGPU.
 */
const runSession = async (feed, entry, workload, spec, api) => {
  const outputs = [];
  const replays = {bindGroups: 0, uniformWrites: 0};
  const recorded = new Set();
  const lastRuns = new Map(); // graph -> its last run's outputs by name (a decoder's caches)
  for (const [i, [graph, v]] of workload.schedule.entries()) {
    const variant = workload.variants[v];
    const prefill = variant.draw === PREFILL_DRAW;
    const data = await Promise.all(variant.inputs.map((input) => bytes(input.bin)));
    const {feeds, fetches, readers, options} =
      await feed.scheduledRun(entry, spec, [graph, v, prefill], data, lastRuns.get(graph));
    const before = {...counts};
    api?.[prefill ? 'suspend' : 'startRun'](); // a prefill is no capture run: no fault touches it
    let results;
    try {
      results = await (options ? entry.session.run(feeds, fetches, options) : entry.session.run(feeds, fetches));
    } catch (error) {
      return runFailure(spec, i, graph, error, prefill);
    } finally {
      if (prefill) {
        api?.resume();
      } else {
        api?.endRun(entry.name);
      }
    }
    if (recorded.has(graph)) {
      replays.bindGroups += counts.bindGroups - before.bindGroups;
      replays.uniformWrites += counts.uniformWrites - before.uniformWrites;
    }
    if (!prefill) {
      recorded.add(graph);
    }
    const run = {};
    for (const name of workload.outputs) {
      const tensor = results[name];
      const read = readers && readers[name];
      run[name] = {type: tensor.type, dims: tensor.dims, data: await (read ? read() : tensor.getData())};
    }
    outputs.push(defined(workload, variant, data, run));
    lastRuns.set(graph, Object.fromEntries(Object.entries(run).map(([name, tensor]) => [name, tensor.data])));
  }
  return {status: 'ok', runs: outputs, replays};
};

/** Creates (or reuses) the step's session and runs it; a failure becomes a status. */
const runStep = async (ort, feed, manifest, step, index, sessions) => {
  const workload = manifest.workloads[step.workload];
  const faults = faultsOn ? step.faults : [];
  const api = faultsOn ? window.__webgpuFaults : undefined;
  const name = `step ${index + 1}`;
  const started = performance.now();
  try {
    if (step.reuse === null) {
      if (step.mode === 'capture') {
        api?.beginRecording(name, faults, Math.max(2, step.graphs));
      }
      try {
        sessions[index] = await createSession(ort, workload, {...feedSpec(workload, step, name), faults});
      } catch (error) {
        const message = String(error && error.message ? error.message : error);
        return {status: creationStatus(step.mode === 'capture', message), message};
      }
    } else {
      sessions[index] = sessions[step.reuse];
    }
    const spec = feedSpec(workload, step, sessions[index].name);
    const ran = await runSession(feed, sessions[index], workload, spec, api);
    if (step.mode !== 'capture') {
      // The suite's page releases a case's session when the case ends, but for a capture a
      // revisit runs again: an eager one then, always. Kept, it changes the wasm heap under
      // the capture after it (a decoder's capture replays on 1.30.0 throw with it kept).
      await releaseEntry(sessions[index]);
    }
    return ran;
  } catch (error) {
    return {status: 'error', message: String(error && error.message ? error.message : error)};
  } finally {
    api?.endRecording();
    const what = step.reuse === null ? '' : ` (the session of step ${step.reuse + 1} again)`;
    say(`step ${index + 1}/${manifest.steps.length}: ${step.name}${what}: ` +
        `${((performance.now() - started) / 1000).toFixed(2)} s`);
  }
};

/**
 * A scenario's steps (repro.json's `scenario`), run by scenario.mjs as the suite's page runs
 * them, on this page's sessions and feeds; its report, every run's outputs as typed arrays.
 */
const runScenario = async (ort, feed, manifest) => {
  const workload = manifest.workloads.main;
  const {scenario} = manifest;
  const faults = faultsOn ? FAULTS : [];
  const api = faultsOn ? window.__webgpuFaults : undefined;
  const steps = scenario.steps.map((step, i) => ({...step, variant: (scenario.feeds[i] || [])[1]}));
  let before = counts;
  const report = await runScenarioSteps({sessions: scenario.sessions, steps, outputNames: workload.outputs}, {
    sessionSpec: (step, session) => ({
      ...feedSpec(workload, {
        mode: session.capture ? 'capture' : 'eager',
        buffers: {inputs: step.inputs === 'fresh' ? 'fresh' : 'rewrite', outputs: session.outputs},
        graphs: session.graphs,
      }, sessionName(step.session)),
      location: session.location,
      faults,
    }),
    createSession: async (spec) => {
      try {
        return {entry: await createSession(ort, workload, spec)};
      } catch (error) {
        const message = String(error && error.message ? error.message : error);
        return {failed: {status: creationStatus(spec.mode === 'capture', message), message}};
      }
    },
    releaseEntry,
    runArguments: async (entry, spec, graph, variant) => feed.runArguments(
      entry, spec, graph, await Promise.all(workload.variants[variant].inputs.map((input) => bytes(input.bin)))),
    startRun: () => {
      before = {...counts};
    },
    endRun: () => ({
      createBindGroup: counts.bindGroups - before.bindGroups,
      uniformWrites: counts.uniformWrites - before.uniformWrites,
    }),
    output: (tensor, data) => ({type: tensor.type, dims: tensor.dims, data}),
    faults: api,
  });
  const ran = report.failedStep ?? steps.length;
  steps.slice(0, ran).forEach((step, i) => say(`step ${i + 1}/${steps.length}: ${step.action}: ${step.session}`));
  if (report.status !== 'ok') {
    const where = report.cleanUp ? 'clean-up' : `step ${ran + 1}/${steps.length}`;
    say(`${where}: ${report.status}: ${report.message}`);
  }
  return report;
};

const tensorsOf = async (entries) => Object.fromEntries(
  await Promise.all(entries.map(async (spec) => [spec.name, await tensorFile(spec)])));

/** The suite's judge on the steps' results: Pyodide runs the bundle's judge/ (its Python
 * files, runner/scenario/bundled.py's `judge_page`), which holds every tensor as an index into
 * `table` and asks `compareOutputs` and `firstDifference` about them. */
const judgeSteps = async (manifest, results) => {
  const {loadPyodide} = await import(`${PYODIDE_URL}pyodide.mjs`);
  const pyodide = await loadPyodide({indexURL: new URL(PYODIDE_URL, location.href).href});
  for (const path of manifest.judgeModules) {
    const target = `/bundle/${path}`;
    pyodide.FS.mkdirTree(target.slice(0, target.lastIndexOf('/')));
    pyodide.FS.writeFile(target, new Uint8Array(await bytes(path)));
  }
  pyodide.runPython("import sys; sys.path.insert(0, '/bundle/judge')");
  const table = [];
  const hold = (outputs) => table.push(outputs) - 1;
  const references = {};
  for (const [name, workload] of Object.entries(manifest.workloads)) {
    references[name] = [];
    for (const variant of workload.variants) {
      references[name].push(hold(await tensorsOf(variant.cpu)));
    }
  }
  const reported = manifest.scenario
    ? {...results, steps: results.steps.map((s) => (s.outputs ? {...s, outputs: hold(s.outputs)} : s))}
    : results.map((r) => (r.status === 'ok' ? {...r, runs: r.runs.map(hold)} : r));
  const judgePage = pyodide.pyimport('runner.scenario.bundled').judge_page;
  return JSON.parse(judgePage(
    JSON.stringify(manifest), JSON.stringify(reported), JSON.stringify(references),
    (a, b, abs, rel, exact) => JSON.stringify(compareOutputs(table[a], table[b], {abs, rel}, exact)),
    (a, b) => firstDifference(table[a], table[b])));
};

const main = async () => {
  if (typeof GPUDevice === 'undefined' || !navigator.gpu) {
    return failure('this browser offers no WebGPU (navigator.gpu)');
  }
  installCounters();
  if (faultsOn && FAULT_SCRIPT) {
    window.__webgpuTracer = {bindGroupRewriters: rewriters}; // where faults.js hooks in
    await import(FAULT_SCRIPT);
  }
  const manifest = await (await fetch('repro.json')).json();
  const [ort, adapter] = await Promise.all([loadModule(ORT_URL), navigator.gpu.requestAdapter()]);
  ort.env.wasm.numThreads = 1; // threads need cross-origin isolation; WebGPU does the work
  ort.env.logLevel = 'error';
  const info = adapter ? adapter.info : {};
  say(`onnxruntime-web ${ort.env.versions ? ort.env.versions.web : ''} (${ORT_URL}); WebGPU adapter: ` +
      `${info.vendor || '?'} ${info.architecture || '?'} ${info.device || ''}`.trim());
  say(`result ${manifest.result}: ${manifest.case}`);
  if (FAULTS.length) {
    say(`injected fault(s) ${FAULTS.join(', ')}: ${faultsOn ? 'on (?faults=off turns them off)' : 'off'}`);
  }
  const feed = feeder(
    ort, faultsOn ? window.__webgpuFaults : undefined, async () => new Uint8Array(await bytes('allocator.onnx')));
  if (manifest.scenario) {
    return await judgeSteps(manifest, await runScenario(ort, feed, manifest));
  }
  // The suite's page's own session (harness.js's contextSession), made before its first case
  // and kept, never run: what lives on the wasm heap decides where a replay's outputs land (a
  // decoder's capture replays on 1.30.0 throw without it). Scenarios go without it, as there.
  contextSession = await ort.InferenceSession.create(
    new Uint8Array(await bytes('context.onnx')), {executionProviders: [{name: 'webgpu'}]});
  const sessions = [];
  const results = [];
  for (const [index, step] of manifest.steps.entries()) {
    results[index] = await runStep(ort, feed, manifest, step, index, sessions);
  }
  return await judgeSteps(manifest, results);
};

/** Shows the judge's lines, the last PASS or FAIL (the title too); `window.reproResult`. */
const finish = ({verdict, verdicts, message, lines: judged}) => {
  judged.forEach(say);
  document.title = judged[judged.length - 1];
  window.reproResult = {verdict, verdicts, message, faults: faultsOn ? FAULTS : [], lines};
};

/** The page itself failed (no WebGPU, a fetch, Pyodide): the verdict is `error`. */
const failure = (error) => {
  const message = String(error && error.message ? error.message : error);
  return {verdict: 'error', verdicts: ['error'], message, lines: [`error: ${message}`, 'FAIL: error']};
};

main().catch(failure).then(finish);
