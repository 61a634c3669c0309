// Reproduces one failing result with onnxruntime-web alone. repro.json lists the sessions to
// create, in the order the suite created them ("steps"), and each model with its inputs and
// onnxruntime CPU's outputs ("workloads"). Each run gets the inputs its workload's `schedule`
// names, in the GPU buffers the step's `buffers` say (the same ones rewritten, or a new one
// every run), on the graph (gpu_graph_id) it names when the step records several. The last
// step is judged by the suite's own judge, in Python: Pyodide runs the bundle's judge/
// (runner/repro/judging.py), which asks this script to compare tensors (`compareOutputs`).
// A scenario's bundle holds its steps instead ("scenario"): scenario.mjs, which the suite's
// page runs them with too, replays them, and the judge names the first failing step.
// Serve the folder (python3 -m http.server) and open index.html; ?faults=off runs the same
// steps without the injected fault(s) a --with-fault bundle carries.
import {creationStatus, runScenarioSteps, sessionName} from './scenario.mjs';

const UNIFORM = 0x40; // GPUBufferUsage.UNIFORM
const TYPED_ARRAYS = {
  float32: Float32Array,
  float16: Uint16Array,
  float64: Float64Array,
  int64: BigInt64Array,
  uint64: BigUint64Array,
  int32: Int32Array,
  uint32: Uint32Array,
  int16: Int16Array,
  uint16: Uint16Array,
  int8: Int8Array,
  uint8: Uint8Array,
  bool: Uint8Array,
};

/**
 * The session options, as the suite creates its sessions (its harness.js): the EP as an
 * object, since the C++ EP builds pass enableGraphCapture on only then; capture sessions take
 * GPU-buffer inputs and keep their outputs on the GPU. `epAsString` is the injected fault
 * ep-name-as-string: the EP named 'webgpu', which the C++ builds take without capturing.
 */
const sessionOptions = (workload, mode, epAsString, location) => ({
  executionProviders: [epAsString ? 'webgpu' : {name: 'webgpu'}],
  freeDimensionOverrides: workload.freeDimensionOverrides,
  ...(mode === 'capture' ? {enableGraphCapture: true, preferredOutputLocation: 'gpu-buffer'} : {}),
  ...(location ? {preferredOutputLocation: location} : {}), // a scenario's session says
});

const lines = [];
const say = (text) => {
  lines.push(text);
  console.log(text);
  document.getElementById('log').textContent = lines.join('\n');
};

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
 * ratio within `rel`. Errors are JSON: null stands for an infinite one. */
const compare = (actual, expected, tolerance) => {
  const total = expected.data.length;
  if (!actual || !sameDims(actual.dims, expected.dims)) {
    const dims = (tensor) => (tensor ? tensor.dims.map(Number) : []);
    return {maxAbs: null, maxRel: null, mismatched: total, total, shapes: [dims(actual), dims(expected)]};
  }
  const a = numbers(actual);
  const e = numbers(expected);
  let [maxAbs, maxRel, mismatched] = [0, 0, 0];
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
    maxAbs = Math.max(maxAbs, diff);
    maxRel = Math.max(maxRel, rel);
  }
  const json = (value) => (Number.isFinite(value) ? value : null);
  return {maxAbs: json(maxAbs), maxRel: json(maxRel), mismatched, total, shapes: null};
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

const byteLength = (spec) =>
  spec.dims.reduce((a, b) => a * b, 1) * TYPED_ARRAYS[spec.type].BYTES_PER_ELEMENT;

/** A GPU buffer on ORT's device for a tensor `spec`. */
const gpuBuffer = (ort, spec) => ort.env.webgpu.device.createBuffer({
  size: Math.ceil(byteLength(spec) / 16) * 16 || 16,
  usage: GPUBufferUsage.STORAGE | GPUBufferUsage.COPY_SRC | GPUBufferUsage.COPY_DST,
});

const writeInput = (ort, buffer, data) => {
  const padded = new Uint8Array(buffer.size);
  padded.set(new Uint8Array(data));
  ort.env.webgpu.device.queue.writeBuffer(buffer, 0, padded);
};

/** A pre-allocated output's bytes, copied through a mappable buffer. */
const readOutput = async (ort, buffer, spec) => {
  const device = ort.env.webgpu.device;
  const size = Math.ceil(byteLength(spec) / 4) * 4 || 4;
  const staging = device.createBuffer({size, usage: GPUBufferUsage.MAP_READ | GPUBufferUsage.COPY_DST});
  const encoder = device.createCommandEncoder();
  encoder.copyBufferToBuffer(buffer, 0, staging, 0, size);
  device.queue.submit([encoder.finish()]);
  await staging.mapAsync(GPUMapMode.READ);
  const data = staging.getMappedRange().slice(0, byteLength(spec));
  staging.unmap();
  staging.destroy();
  return new TYPED_ARRAYS[spec.type](data);
};

/**
 * Graph capture needs its inputs in GPU buffers on ORT's device: each graph's are made on its
 * first run and kept, as an application keeps them, or made again every run with
 * `buffers.inputs` 'fresh'; likewise pre-allocated outputs (`buffers.outputs` not 'none'), typed
 * and shaped as onnxruntime CPU's outputs.
 */
const graphTensors = (ort, entry, workload, step, graph, api) => {
  const known = entry.graphs.get(graph);
  const held = {...known};
  if (!known || step.buffers.inputs === 'fresh') {
    held.inputBuffers = workload.inputs.map((spec) => gpuBuffer(ort, spec));
    api?.inputs(entry.name, graph, held.inputBuffers, workload.inputs.map((spec) => spec.name));
    held.feeds = Object.fromEntries(workload.inputs.map((spec, i) => [
      spec.name, ort.Tensor.fromGpuBuffer(held.inputBuffers[i], {dataType: spec.type, dims: spec.dims})]));
  }
  if (step.buffers.outputs !== 'none' && (!known || step.buffers.outputs === 'fresh')) {
    held.fetches = {};
    held.readers = {};
    for (const spec of workload.cpu) {
      const buffer = gpuBuffer(ort, spec);
      held.readers[spec.name] = () => readOutput(ort, buffer, spec);
      held.fetches[spec.name] = ort.Tensor.fromGpuBuffer(
        buffer, {dataType: spec.type, dims: spec.dims, download: held.readers[spec.name]});
    }
  }
  entry.graphs.set(graph, held);
  return held;
};

/** One run's feeds (and pre-allocated fetches): CPU tensors, or the graph's GPU tensors with
 * the run's inputs written into their buffers (capture). */
const runArguments = async (ort, entry, workload, step, graph, variant, api) => {
  const data = await Promise.all(variant.inputs.map((spec) => bytes(spec.bin)));
  if (step.mode !== 'capture') {
    return {feeds: Object.fromEntries(workload.inputs.map((spec, i) => [
      spec.name, new ort.Tensor(spec.type, new TYPED_ARRAYS[spec.type](data[i]), spec.dims)]))};
  }
  const held = graphTensors(ort, entry, workload, step, graph, api);
  held.inputBuffers.forEach((buffer, i) => writeInput(ort, buffer, data[i]));
  return {feeds: held.feeds, fetches: held.fetches, readers: held.readers};
};

const createSession = async (ort, workload, step, name) => {
  const model = new Uint8Array(await bytes(workload.model));
  const asString = step.faults.includes('ep-name-as-string');
  const options = sessionOptions(workload, step.mode, asString, step.location);
  const session = await ort.InferenceSession.create(model, options);
  return {session, name, graphs: new Map()};
};

/** What a failed run means: JSEP refuses a buffer it did not record with. */
const runFailure = (step, index, graph, error) => {
  const message = String(error && error.message ? error.message : error);
  const where = step.graphs > 1 ? ` (gpu_graph_id ${graph})` : '';
  const refused = step.mode === 'capture' && /graph capture mode is not supported/i.test(message);
  return {status: refused ? 'capture-unsupported' : 'error', message: `run ${index + 1}${where}: ${message}`};
};

/**
 * The workload's runs on a session (its `schedule`: each run's graph and inputs), every run's
 * outputs read back; what replays (a graph's runs after its first) asked of WebGPU.
 */
const runSession = async (ort, entry, workload, step, api) => {
  const outputs = [];
  const replays = {bindGroups: 0, uniformWrites: 0};
  const recorded = new Set();
  for (const [i, [graph, v]] of workload.schedule.entries()) {
    const {feeds, fetches, readers} =
      await runArguments(ort, entry, workload, step, graph, workload.variants[v], api);
    const before = {...counts};
    api?.startRun();
    let results;
    try {
      results = await (step.graphs > 1
        ? entry.session.run(feeds, fetches || workload.outputs, {extra: {gpu_graph_id: String(graph)}})
        : entry.session.run(feeds, fetches || workload.outputs));
    } catch (error) {
      return runFailure(step, i, graph, error);
    } finally {
      api?.endRun(entry.name);
    }
    if (recorded.has(graph)) {
      replays.bindGroups += counts.bindGroups - before.bindGroups;
      replays.uniformWrites += counts.uniformWrites - before.uniformWrites;
    }
    recorded.add(graph);
    const run = {};
    for (const name of workload.outputs) {
      const tensor = results[name];
      const data = readers ? await readers[name]() : await tensor.getData();
      run[name] = {type: tensor.type, dims: tensor.dims, data};
    }
    outputs.push(run);
  }
  return {status: 'ok', runs: outputs, replays};
};

/** Creates (or reuses) the step's session and runs it; a failure becomes a status. */
const runStep = async (ort, manifest, step, index, sessions) => {
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
        sessions[index] = await createSession(ort, workload, {...step, faults}, name);
      } catch (error) {
        const message = String(error && error.message ? error.message : error);
        return {status: creationStatus(step.mode === 'capture', message), message};
      }
    } else {
      sessions[index] = sessions[step.reuse];
    }
    return await runSession(ort, sessions[index], workload, step, api);
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
const runScenario = async (ort, manifest) => {
  const workload = manifest.workloads.main;
  const {scenario} = manifest;
  const faults = faultsOn ? FAULTS : [];
  const api = faultsOn ? window.__webgpuFaults : undefined;
  const steps = scenario.steps.map((step, i) => ({...step, variant: (scenario.feeds[i] || [])[1]}));
  let before = counts;
  const report = await runScenarioSteps({sessions: scenario.sessions, steps, outputNames: workload.outputs}, {
    sessionSpec: (step, session) => ({
      mode: session.capture ? 'capture' : 'eager',
      name: sessionName(step.session),
      buffers: {inputs: step.inputs === 'fresh' ? 'fresh' : 'rewrite', outputs: session.outputs},
      location: session.location,
      graphs: session.graphs,
      faults,
    }),
    createSession: async (spec) => {
      try {
        return {entry: await createSession(ort, workload, spec, spec.name)};
      } catch (error) {
        const message = String(error && error.message ? error.message : error);
        return {failed: {status: creationStatus(spec.mode === 'capture', message), message}};
      }
    },
    releaseEntry: (entry) => entry.session.release(),
    runArguments: async (entry, spec, graph, variant) => {
      const args = await runArguments(ort, entry, workload, spec, graph, workload.variants[variant], api);
      return {...args, fetches: args.fetches || workload.outputs};
    },
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
 * files, runner/repro/judging.py's `judge_page`), which holds every tensor as an index into
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
  const judgePage = pyodide.pyimport('runner.repro.judging').judge_page;
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
  const [ort, adapter] = await Promise.all([import(ORT_URL), navigator.gpu.requestAdapter()]);
  ort.env.wasm.numThreads = 1; // threads need cross-origin isolation; WebGPU does the work
  ort.env.logLevel = 'error';
  const info = adapter ? adapter.info : {};
  say(`onnxruntime-web ${ort.env.versions.web} (${ORT_URL}); WebGPU adapter: ` +
      `${info.vendor || '?'} ${info.architecture || '?'} ${info.device || ''}`.trim());
  say(`result ${manifest.result}: ${manifest.case}`);
  if (FAULTS.length) {
    say(`injected fault(s) ${FAULTS.join(', ')}: ${faultsOn ? 'on (?faults=off turns them off)' : 'off'}`);
  }
  if (manifest.scenario) {
    return await judgeSteps(manifest, await runScenario(ort, manifest));
  }
  const sessions = [];
  const results = [];
  for (const [index, step] of manifest.steps.entries()) {
    results[index] = await runStep(ort, manifest, step, index, sessions);
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
