// The page side of the ort-web backend: loads one onnxruntime-web bundle, then runs cases that
// Python hands it. A case creates a session and runs its schedule: each run a graph (its
// gpu_graph_id, when the case has several) and its own inputs (eager and dynamic: CPU tensors;
// capture: GPU tensors, graph capture on, the inputs written into the graph's GPU buffers or into
// a new buffer per run, outputs allocated by ORT or pre-allocated, as `buffers` says). It reads
// every run's outputs back and reports timings and the tracer's records. A case runs next to nothing
// an earlier case made: its outputs are disposed once read and its session released (GPU buffers
// with it) when it ends, whatever way it ends, but for a session a later revisit runs again
// (`keepSession`), kept until then so that the revisit replays the earlier capture after the
// sequence's other layouts (layout-change sequences).
// A case's `faults` (faults.js) are armed only while its own capture session records.
import {feeder, loadModule, releaseEntry} from './feeds.mjs';
import {creationStatus, runScenarioSteps, runStatus, sessionName} from './scenario.mjs';

const tracer = window.__webgpuTracer;
const faults = window.__webgpuFaults;
// `${key}/${mode}` -> {session, buffers, graphs, ...}: the running case's, and those kept for a
// revisit
const sessions = new Map();
const liveOutputs = new Set(); // GPU output tensors onnxruntime allocated, until disposed
// The page's own session, made before its first case and never run: it keeps ORT's WebGPU context
// (device, program cache) for the page's life, as an application's long-lived session would. The
// C++ builds tear their context down with their last session, and rebuilding it for every case cost
// about 5 s a case on SwiftShader; JSEP keeps its backend for the page anyway. Scenarios, each on an
// onnxruntime-web of its own, go without it: it changes what lives on the wasm heap.
let contextSession = null;
let contextModelUrl = null;
let allocatorModelUrl = null; // context.py's, which feeds.mjs runs for allocator 'onnxruntime'
const fetched = new Map(); // url -> ArrayBuffer, for the current sequence
let ort = null;
let feed = null; // feeds.mjs's feeding, once ort is loaded
let moduleUrl = null; // the bundle's, and how many instances of it the page has imported
let instances = 0;

/** The bytes at `url`, fetched once per sequence: data URLs are named by their content. */
const fetchBytes = async (url) => {
  if (!fetched.has(url)) {
    const response = await fetch(url);
    if (!response.ok) {
      throw new Error(`fetching ${url}: HTTP ${response.status}`);
    }
    fetched.set(url, await response.arrayBuffer());
  }
  return fetched.get(url);
};

const toBase64 = (view) => {
  const bytes = new Uint8Array(view.buffer, view.byteOffset, view.byteLength);
  let text = '';
  for (let i = 0; i < bytes.length; i += 0x8000) {
    text += String.fromCharCode.apply(null, bytes.subarray(i, i + 0x8000));
  }
  return btoa(text);
};

const median = (values) => {
  if (!values.length) {
    return null;
  }
  const sorted = [...values].sort((a, b) => a - b);
  const middle = sorted.length >> 1;
  return sorted.length % 2 ? sorted[middle] : (sorted[middle - 1] + sorted[middle]) / 2;
};

const releaseSession = async (name) => {
  const entry = sessions.get(name);
  sessions.delete(name);
  faults.forget(name);
  if (entry) {
    await releaseEntry(entry);
  }
};

/** A new sequence begins: sessions kept for a revisit that did not come go (fetches too). */
const releaseSessions = async () => {
  fetched.clear();
  for (const name of [...sessions.keys()]) {
    await releaseSession(name);
  }
};

/**
 * Creates the case's session: an entry of `sessions`, or a result that says why there is no
 * session. Capture inputs live in GPU buffers kept with the session (`graphTensors`): a
 * captured graph replays on the buffers it recorded with.
 */
const createSession = async (spec) => {
  const capture = spec.mode === 'capture';
  const model = await fetchBytes(spec.model);
  // The EP as an object, not the string 'webgpu': the C++ EP builds (ort.webgpu.mjs,
  // ort.jspi.mjs) pass enableGraphCapture on to the EP only then, and otherwise run a capture
  // session uncaptured without a word. JSEP takes either form.
  // Fault `ep-name-as-string` passes it the other way, as users easily do (backend.FAULTS).
  const asString = (spec.faults || []).includes('ep-name-as-string');
  const ep = {name: 'webgpu'};
  if (spec.preferredLayout) { // the layout's: onnxruntime-web takes it on the EP object only
    ep.preferredLayout = spec.preferredLayout;
  }
  const options = {executionProviders: [asString ? 'webgpu' : ep]};
  if (spec.freeDimensionOverrides) { // none in mode dynamic
    options.freeDimensionOverrides = spec.freeDimensionOverrides;
  }
  if (capture) {
    Object.assign(options, {enableGraphCapture: true, preferredOutputLocation: 'gpu-buffer'});
  }
  if (spec.outputLocation) { // a scenario's session says where its outputs stay
    options.preferredOutputLocation = spec.outputLocation;
  }
  tracer.begin('session');
  let session;
  const start = performance.now();
  try {
    session = await ort.InferenceSession.create(new Uint8Array(model), options);
  } catch (error) {
    tracer.end();
    // before 1.17 onnxruntime-web throws some refusals as a bare number (a C++ exception)
    const message = typeof error === 'number'
      ? `onnxruntime-web threw a bare number (${error}): a C++ exception without its message`
      : String(error && error.message ? error.message : error);
    // ORT's time up to the refusal counts as the backend's, like a created session's
    const timings = {sessionMs: performance.now() - start, firstRunMs: null, medianRunMs: null};
    const status = creationStatus(capture, message);
    return {failed: {status, message, timings, captureThrew: capture}};
  }
  const entry = {session, buffers: [], tensors: [], graphs: new Map(), sessionMs: performance.now() - start};
  entry.sessionRecord = tracer.end();
  return {entry};
};

/** A failed run, numbered; `capture-unsupported` where the build refuses a buffer or graph. */
const runFailure = (spec, index, graph, error, prefill = false) => {
  const message = String(error && error.message ? error.message : error).replace(/\s+/g, ' ');
  const where = (prefill ? ', the prefill' : '') + (spec.graphs > 1 ? ` (gpu_graph_id ${graph})` : '');
  const failure = new Error(`run ${index + 1}${where}: ${message}`);
  failure.status = runStatus(spec.mode === 'capture', message);
  failure.captureThrew = spec.mode === 'capture';
  return failure;
};

/**
 * Runs the case's schedule on a session; every run's outputs read back, the last run's
 * dispatches recorded. A run is timed from writing its inputs until its outputs are on the host.
 * The outputs onnxruntime allocated on the GPU are disposed once read, or once a read failed.
 */
const runSession = async (entry, spec) => {
  const variants = await Promise.all(spec.variants.map((urls) => Promise.all(urls.map(fetchBytes))));
  const runs = [];
  const records = [];
  const times = [];
  const outputBuffers = [];
  const inputBuffers = new Set();
  const lastRuns = new Map(); // graph -> its last run's outputs by name (a decoder's caches)
  for (const [i, [graph, variant, prefill]] of spec.schedule.entries()) {
    const last = i === spec.schedule.length - 1;
    const start = performance.now();
    const {feeds, fetches, readers, inputs, options} =
      await feed.scheduledRun(entry, spec, [graph, variant, prefill], variants[variant], lastRuns.get(graph));
    (inputs || []).forEach((buffer) => inputBuffers.add(tracer.bufferId(buffer)));
    tracer.begin('run', {dispatches: last});
    // a prefill is no capture run: no fault touches it, and it counts for none of the recording
    faults[prefill ? 'suspend' : 'startRun']();
    let results;
    try {
      results = await (options
        ? entry.session.run(feeds, fetches, options)
        : entry.session.run(feeds, fetches));
    } catch (error) {
      tracer.end();
      throw runFailure(spec, i, graph, error, prefill);
    } finally {
      if (prefill) {
        faults.resume();
      } else {
        faults.endRun(spec.sessionName);
      }
    }
    const ran = performance.now() - start;
    records.push(tracer.end());
    // Disposed once read, as an application does when done with an output: a kept one holds its
    // OrtValue on the wasm heap, which shifts where later runs' tensors land (a replay with
    // pre-allocated outputs then fails: ort-held-output). Pre-allocated ones are the harness's.
    // Chosen before getData, which moves a tensor to location 'cpu' but keeps its GPU buffer and
    // OrtValue until dispose.
    const allocated = Object.entries(results)
      .filter(([outputName, tensor]) => tensor.location === 'gpu-buffer' && !readers?.[outputName])
      .map(([, tensor]) => tensor);
    allocated.forEach((tensor) => liveOutputs.add(tensor));
    // A run is timed until its outputs are on the host, as an eager run's are when
    // session.run returns (and wgpu's runs are); a capture run's stay on the GPU until getData,
    // which waits for the run's GPU work.
    tracer.begin('readback');
    const readStart = performance.now();
    const tensors = [];
    try {
      for (const outputName of spec.outputNames) {
        const tensor = results[outputName];
        if (!tensor) {
          throw new Error(`the session has no output named ${outputName}`);
        }
        if (last && tensor.location === 'gpu-buffer') {
          outputBuffers.push(tracer.bufferId(tensor.gpuBuffer));
        }
        const read = readers && readers[outputName];
        tensors.push([outputName, tensor, await (read ? read() : tensor.getData())]);
      }
    } finally {
      tracer.end();
      for (const tensor of allocated) {
        tensor.dispose();
        liveOutputs.delete(tensor);
      }
    }
    if (!prefill) { // not a step: its time is in no step's timing
      times.push(ran + performance.now() - readStart);
    }
    const outputs = {};
    for (const [outputName, tensor, data] of tensors) {
      outputs[outputName] = {type: tensor.type, dims: tensor.dims, data: toBase64(data)};
    }
    runs.push(outputs);
    lastRuns.set(graph, Object.fromEntries(tensors.map(([name, , data]) => [name, data])));
  }
  return {runs, records, outputBuffers, inputBuffers: [...inputBuffers], times};
};

/**
 * One case. `spec.reuseSession` (a revisit) runs the session an earlier case of the same
 * workload and mode kept alive, so its runs replay the earlier capture; otherwise, or if that
 * session is gone, a new session replaces any earlier one of the same name. The session is
 * released when the case ends, unless the case ran and a revisit will run it again
 * (`spec.keepSession`).
 */
const runCase = async (spec) => {
  if (!contextSession) {
    const model = new Uint8Array(await (await fetch(contextModelUrl)).arrayBuffer());
    contextSession = await ort.InferenceSession.create(model, {executionProviders: [{name: 'webgpu'}]});
  }
  if (spec.opensSequence) {
    await releaseSessions();
  }
  const name = `${spec.key}/${spec.mode}`;
  let entry = spec.reuseSession ? sessions.get(name) : undefined;
  const reused = entry !== undefined;
  let keep = false;
  try {
    if (!reused) {
      await releaseSession(name);
      if (spec.mode === 'capture') {
        faults.beginRecording(name, spec.faults, Math.max(2, spec.graphs));
      }
      const created = await createSession(spec);
      if (created.failed) {
        return created.failed;
      }
      entry = created.entry;
      sessions.set(name, entry);
    }
    const ran = await runSession(entry, {...spec, sessionName: name});
    keep = spec.keepSession;
    return caseResult(entry, reused, ran);
  } finally {
    if (spec.closesSequence) {
      await releaseSessions();
    } else if (!keep) {
      await releaseSession(name);
    }
  }
};

/** A case's result from the runs of its session (`entry`, `reused` from an earlier case). */
const caseResult = (entry, reused, {runs, records, outputBuffers, inputBuffers, times}) => ({
  status: 'ok',
  message: '',
  reusedSession: reused,
  runs,
  records,
  sessionRecord: reused ? {label: 'session', counts: {}} : entry.sessionRecord,
  inputBuffers,
  outputBuffers,
  timings: {
    sessionMs: reused ? null : entry.sessionMs,
    firstRunMs: times[0],
    medianRunMs: median(times.slice(1)),
  },
});

/**
 * A scenario's steps (runner/scenario), run by scenario.mjs (as a repro bundle's page runs
 * them) with this page's sessions, feeds and tracer; its result with every step's outputs.
 */
const runScenario = async (spec) => {
  await releaseSessions();
  const variants = await Promise.all(spec.variants.map((urls) => Promise.all(urls.map(fetchBytes))));
  return runScenarioSteps(spec, {
    sessionSpec: (step, session) => ({
      ...spec,
      mode: session.capture ? 'capture' : 'eager',
      outputLocation: session.location,
      sessionName: sessionName(step.session),
      buffers: {inputs: step.inputs === 'fresh' ? 'fresh' : 'rewrite', outputs: session.outputs},
      outputs: session.outputs === 'none' ? undefined : spec.outputs,
      graphs: session.graphs,
    }),
    createSession,
    releaseEntry,
    runArguments: (entry, sessionSpec, graph, variant) =>
      feed.runArguments(entry, sessionSpec, graph, variants[variant]),
    startRun: () => tracer.begin('run'),
    endRun: () => tracer.end().counts,
    output: (tensor, data) => ({type: tensor.type, dims: tensor.dims, data: toBase64(data)}),
    faults,
    quiet: () => window.__devicePool?.stepping(false),
  });
};

/** What the page's WebGPU adapter is, or null when there is none. */
const adapterInfo = async () => {
  const adapter = navigator.gpu && (await navigator.gpu.requestAdapter());
  if (!adapter) {
    return null;
  }
  const {vendor, architecture, device, description} = adapter.info;
  return {vendor, architecture, device, description, features: [...adapter.features].sort()};
};

/** `job`, or a `timeout` result after `ms` (Python then closes the page, abandoning the job). */
const withDeadline = (job, ms) => {
  let timer;
  const expired = new Promise((resolve) => {
    timer = setTimeout(() => resolve({status: 'timeout'}), ms);
  });
  return Promise.race([job, expired]).finally(() => clearTimeout(timer));
};

/** `module` is the onnxruntime-web the page runs from now on. */
const use = (module) => {
  ort = module;
  feed = feeder(ort, faults, async () => new Uint8Array(await fetchBytes(allocatorModelUrl)));
  ort.env.wasm.numThreads = 1; // threads need cross-origin isolation; WebGPU does the work
  ort.env.logLevel = 'error'; // ORT logs warnings with console.error
};

window.harness = {
  /**
   * Loads the onnxruntime-web bundle at `url` and meanwhile asks for the WebGPU adapter (no
   * page of its own for that): ORT's version (none before 1.17), the adapter or null, and what
   * capture needs that the bundle lacks (`lacks`: GPU tensors came in 1.17). `contextModel`: the
   * URL of the page's own session's model (`contextSession`), `allocatorModel` that of the
   * session allocating buffers (feeds.mjs). `pooled`: enable devicepool.js for the page's
   * instances (`renew`).
   */
  async load(url, contextModel, allocatorModel, pooled) {
    if (pooled) {
      window.__devicePool?.enable(); // absent without WebGPU: the load then says so
    }
    const [module, adapter] = await Promise.all([loadModule(url), adapterInfo()]);
    use(module);
    moduleUrl = url;
    instances = 1;
    contextModelUrl = contextModel;
    allocatorModelUrl = allocatorModel;
    const lacks = typeof ort.Tensor.fromGpuBuffer === 'function' ? [] : ['Tensor.fromGpuBuffer'];
    return {version: ort.env.versions ? ort.env.versions.web : null, adapter, lacks};
  },
  /**
   * A new instance of the bundle for what runs next, in place of a page load (explore's fresh
   * examples): imported again under another URL, so its module state, wasm heap, program cache,
   * sessions and buffers are its own; what devicepool.js shares (the device and what it
   * compiled, the compiled wasm) is all the earlier instances leave it.
   */
  async renew() {
    await releaseSessions();
    await feed.release();
    for (const tensor of liveOutputs) {
      tensor.dispose();
    }
    liveOutputs.clear();
    if (contextSession) {
      const session = contextSession;
      contextSession = null;
      await session.release();
    }
    instances += 1;
    window.__devicePool?.renewed();
    use(await loadModule(`${moduleUrl}${moduleUrl.includes('?') ? '&' : '?'}instance=${instances}`));
    return instances;
  },
  /**
   * Runs one case; returns its result as JSON text: one protocol round trip per case, and
   * Playwright hands over one string much faster than a tree of small objects.
   */
  async run(spec, timeoutMs) {
    const job = runCase(spec)
      .catch((error) => ({
        status: error.status || 'error',
        message: String(error && error.message ? error.message : error),
        captureThrew: Boolean(error && error.captureThrew),
      }))
      .finally(() => faults.endRecording()); // a case that failed mid-run arms nothing after it
    const result = await withDeadline(job, timeoutMs);
    if (result.status !== 'timeout') {
      Object.assign(result, tracer.drain());
      result.deviceLost = tracer.deviceLost;
      // A case that failed on a device destroyed under ORT: later cases in this page fail too.
      const device = ort && ort.env.webgpu.device;
      if (!result.deviceLost && result.status !== 'ok' && device && tracer.isLost(device)) {
        result.deviceLost = "onnxruntime-web's device was destroyed";
      }
      // A wasm abort or trap leaves ORT's module dead: every later case in this page would fail
      // (the C++ builds abort on a Concat of a zero-sized input of lower rank, measured).
      result.aborted = result.status !== 'ok' && /\bAborted\(|\bunreachable\b/.test(result.message);
    }
    return JSON.stringify(result);
  },
  /** Runs one scenario (`runScenario`); its result as JSON text, as `run` returns a case's. */
  async scenario(spec, timeoutMs) {
    // until the scenario only releases its sessions; `realDestroys`: page.py runs it again
    window.__devicePool?.stepping(true, Boolean(spec.realDestroys));
    const job = runScenario(spec).catch((error) => ({
      status: 'error',
      message: String(error && error.message ? error.message : error),
      steps: [],
    })).finally(() => window.__devicePool?.stepping(false));
    const result = await withDeadline(job, timeoutMs);
    if (result.status !== 'timeout') {
      Object.assign(result, tracer.drain());
      result.deviceLost = tracer.deviceLost;
      result.aborted = result.status !== 'ok' && /\bAborted\(|\bunreachable\b/.test(result.message);
      result.usedAfterDestroy = Boolean(window.__devicePool?.usedAfterDestroy);
    }
    return JSON.stringify(result);
  },
  /**
   * What the harness holds between cases: case sessions by name, GPU outputs and buffers; and
   * whether ORT's WebGPU device is alive (the page's own session keeps it).
   */
  holdings() {
    const buffers = [...sessions.values()].reduce((n, entry) => n + entry.buffers.length, 0);
    const device = ort && ort.env.webgpu.device;
    return {
      sessions: [...sessions.keys()],
      outputs: liveOutputs.size,
      buffers,
      deviceAlive: Boolean(contextSession && device && !tracer.isLost(device)),
    };
  },
};
