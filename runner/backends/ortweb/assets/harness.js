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
import {creationStatus, runScenarioSteps, sessionName} from './scenario.mjs';

const tracer = window.__webgpuTracer;
const faults = window.__webgpuFaults;
// `${key}/${mode}` -> {session, buffers, graphs, ...}: the running case's, and those kept for a
// revisit
const sessions = new Map();
const liveOutputs = new Set(); // GPU output tensors onnxruntime allocated, until disposed
// The page's own session, made before its first case and never run: it keeps ORT's WebGPU context
// (device, program cache) for the page's life, as an application's long-lived session would. The
// C++ builds tear their context down with their last session, and rebuilding it for every case cost
// about 5 s a case on SwiftShader; JSEP keeps its backend for the page anyway. Scenarios, each in a
// page of its own, go without it: it changes what lives on the wasm heap.
let contextSession = null;
let contextModelUrl = null;
const fetched = new Map(); // url -> ArrayBuffer, for the current sequence
let ort = null;

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

/** Releases a session and destroys the GPU buffers the harness made for it, even if ORT throws. */
const releaseEntry = async (entry) => {
  try {
    await entry.session.release();
  } finally {
    entry.buffers.splice(0).forEach((buffer) => buffer.destroy());
  }
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

const byteLength = (tensor) =>
  tensor.dims.reduce((a, b) => a * b, 1) * TYPED_ARRAYS[tensor.type].BYTES_PER_ELEMENT;

/** A GPU buffer on ORT's device for a tensor of `bytes` bytes, kept with the session entry. */
const gpuBuffer = (entry, bytes) => {
  const buffer = ort.env.webgpu.device.createBuffer({
    size: Math.ceil(bytes / 16) * 16 || 16,
    usage: GPUBufferUsage.STORAGE | GPUBufferUsage.COPY_SRC | GPUBufferUsage.COPY_DST,
  });
  entry.buffers.push(buffer);
  return buffer;
};

const writeInput = (buffer, bytes) => {
  const padded = new Uint8Array(buffer.size);
  padded.set(new Uint8Array(bytes));
  ort.env.webgpu.device.queue.writeBuffer(buffer, 0, padded);
};

/** A pre-allocated output's reader: its bytes, copied through a mappable buffer. */
const reader = (buffer, output) => async () => {
  const device = ort.env.webgpu.device;
  const size = Math.ceil(byteLength(output) / 4) * 4 || 4;
  const staging = device.createBuffer({size, usage: GPUBufferUsage.MAP_READ | GPUBufferUsage.COPY_DST});
  const encoder = device.createCommandEncoder();
  encoder.copyBufferToBuffer(buffer, 0, staging, 0, size);
  device.queue.submit([encoder.finish()]);
  try {
    await staging.mapAsync(GPUMapMode.READ);
    return new TYPED_ARRAYS[output.type](staging.getMappedRange().slice(0, byteLength(output)));
  } finally {
    staging.destroy(); // unmaps it too
  }
};

/** GPU tensors over `buffers`, one per input of `inputs` (the case's, by default). */
const feedsOver = (spec, buffers, inputs = spec.inputs) => Object.fromEntries(inputs.map(
  (input, i) => [input.name, ort.Tensor.fromGpuBuffer(buffers[i], {dataType: input.type, dims: input.dims})]));

/** Pre-allocated GPU tensors for `outputs` and their readers: [fetches, readers]. */
const outputsOver = (entry, outputs) => {
  const fetches = {};
  const readers = {};
  for (const output of outputs) {
    const buffer = gpuBuffer(entry, byteLength(output));
    readers[output.name] = reader(buffer, output);
    fetches[output.name] = ort.Tensor.fromGpuBuffer(
      buffer, {dataType: output.type, dims: output.dims, download: readers[output.name]});
  }
  return [fetches, readers];
};

/**
 * Outputs written in place into an input's buffer among `buffers` (a decoder's present KV
 * caches into its past ones), as onnxruntime-genai binds a static KV cache: [fetches, readers].
 */
const inPlaceOver = (spec, buffers) => {
  const fetches = {};
  const readers = {};
  for (const [output, inputName] of Object.entries(spec.inPlace || {})) {
    const i = spec.inputs.findIndex((input) => input.name === inputName);
    const input = spec.inputs[i];
    readers[output] = reader(buffers[i], input);
    fetches[output] = ort.Tensor.fromGpuBuffer(
      buffers[i], {dataType: input.type, dims: input.dims, download: readers[output]});
  }
  return [fetches, readers];
};

/**
 * The GPU buffers of one graph of a capture session and the tensors over them: its inputs (and
 * pre-allocated outputs), made on its first run and kept, as an application keeps them; with
 * `buffers.inputs` (`.outputs`) `fresh`, made again for every run. With `spec.swapped`, a second
 * buffer for every input an output is written into: the graph's runs alternate between the two
 * sides (`held`, `held.swap`), each writing its outputs into the buffers the other side reads.
 */
const graphTensors = (entry, spec, graph) => {
  const known = entry.graphs.get(graph);
  const held = {...known};
  if (!known || spec.buffers.inputs === 'fresh') {
    const buffers = spec.inputs.map((input) => gpuBuffer(entry, byteLength(input)));
    faults.inputs(spec.sessionName, graph, buffers, spec.inputs.map((input) => input.name));
    held.inputBuffers = buffers;
    held.feeds = feedsOver(spec, buffers);
    [held.inPlace, held.inPlaceReaders] = inPlaceOver(spec, buffers);
    if (spec.swapped) {
      const written = new Set(Object.values(spec.inPlace));
      const other = buffers.map((buffer, i) => (written.has(spec.inputs[i].name)
        ? gpuBuffer(entry, byteLength(spec.inputs[i])) : buffer));
      [held.inPlace, held.inPlaceReaders] = inPlaceOver(spec, other);
      const [inPlace, inPlaceReaders] = inPlaceOver(spec, buffers);
      held.swap = {inputBuffers: other, feeds: feedsOver(spec, other), inPlace, inPlaceReaders};
      held.turn = 0;
    }
  }
  if (spec.outputs && (!known || spec.buffers.outputs === 'fresh')) {
    // The harness reads the buffers itself: getData would turn a kept tensor into a CPU one.
    [held.fetches, held.readers] = outputsOver(
      entry, spec.outputs.filter((o) => !(spec.inPlace || {})[o.name]));
  }
  entry.graphs.set(graph, held);
  return held;
};

/** CPU tensors of `inputs` (name, type, dims) over `bytes`. */
const cpuFeeds = (inputs, bytes) => Object.fromEntries(inputs.map((input, i) => [
  input.name, new ort.Tensor(input.type, new TYPED_ARRAYS[input.type](bytes[i]), input.dims)]));

/** Zero positions `length` on (axis 2) of a [batch, heads, positions, width] float32 cache. */
const zeroFrom = (array, dims, length) => {
  const [batch, heads, positions, width] = dims;
  for (let block = 0; block < batch * heads; block++) {
    array.fill(0, (block * positions + length) * width, (block + 1) * positions * width);
  }
};

/** The same, in a GPU buffer holding such a cache. */
const zeroFromInBuffer = (buffer, dims, length) => {
  const [batch, heads, positions, width] = dims;
  const zeros = new Uint8Array((positions - length) * width * 4);
  for (let block = 0; block < batch * heads; block++) {
    ort.env.webgpu.device.queue.writeBuffer(buffer, (block * positions + length) * width * 4, zeros);
  }
};

/**
 * One run's feeds and fetches for graph `graph` and input `bytes`: CPU tensors (eager, dynamic),
 * or the graph's GPU tensors with `bytes` written into their buffers (capture); a null in `bytes`
 * leaves that buffer as it is (a decoder's KV cache), `clearFrom` zeroes the positions of those
 * caches from that length on (a rewind).
 */
const runArguments = (entry, spec, graph, bytes, clearFrom) => {
  if (spec.mode !== 'capture') {
    return {feeds: cpuFeeds(spec.inputs, bytes), fetches: spec.outputNames};
  }
  const held = graphTensors(entry, spec, graph);
  const side = held.swap && held.turn++ % 2 ? held.swap : held; // swapped: every other run
  side.inputBuffers.forEach((buffer, i) => {
    if (bytes[i]) {
      writeInput(buffer, bytes[i]);
    } else if (clearFrom !== undefined) {
      zeroFromInBuffer(buffer, spec.inputs[i].dims, clearFrom);
    }
  });
  if (!spec.inPlace) {
    return {
      feeds: held.feeds,
      fetches: held.fetches || spec.outputNames,
      readers: held.readers,
      inputs: held.inputBuffers,
    };
  }
  // null: onnxruntime allocates that output
  const allocated = Object.fromEntries(spec.outputNames.map((name) => [name, null]));
  return {
    feeds: side.feeds,
    fetches: {...allocated, ...held.fetches, ...side.inPlace},
    readers: {...held.readers, ...side.inPlaceReaders},
    inputs: side.inputBuffers,
  };
};

/**
 * A decoder's prefill: the prompt's inputs (`spec.prefillInputs`, CPU tensors) at its own
 * sequence length, uncaptured. Under capture (run option gpu_graph_id -1, as onnxruntime-genai
 * runs its prompt) its KV caches are the graph's GPU buffers that its first decode step reads,
 * zeroed by `bytes` and written in place, so that step starts from the caches the device wrote.
 */
const prefillArguments = (entry, spec, graph, bytes) => {
  if (spec.mode !== 'capture') {
    return {feeds: cpuFeeds(spec.prefillInputs, bytes), fetches: spec.outputNames};
  }
  // A capture session takes GPU buffers only, a run outside capture too (measured on 1.30.0):
  // the prompt's own inputs and outputs get buffers of the graph's, made once.
  const held = graphTensors(entry, spec, graph);
  if (!held.prefill) {
    const buffers = spec.prefillInputs.map((input) => gpuBuffer(entry, byteLength(input)));
    const outputs = spec.prefillOutputs.filter((o) => !spec.inPlace[o.name]);
    const [fetches, readers] = outputsOver(entry, outputs);
    held.prefill = {buffers, feeds: feedsOver(spec, buffers, spec.prefillInputs), fetches, readers};
  }
  const reads = held.swap && held.turn % 2 ? held.swap : held; // what the next decode step reads
  const caches = new Set(Object.values(spec.inPlace));
  const feeds = {...held.prefill.feeds};
  spec.prefillInputs.forEach((input, i) => {
    if (caches.has(input.name)) {
      writeInput(reads.inputBuffers[spec.inputs.findIndex((own) => own.name === input.name)], bytes[i]);
      feeds[input.name] = reads.feeds[input.name];
    } else {
      writeInput(held.prefill.buffers[i], bytes[i]);
    }
  });
  // the tensors that write into those buffers in place
  const into = held.swap && reads === held ? held.swap : held;
  return {
    feeds,
    fetches: {...held.prefill.fetches, ...into.inPlace},
    readers: {...held.prefill.readers, ...into.inPlaceReaders},
    inputs: reads.inputBuffers,
    options: {extra: {gpu_graph_id: '-1'}},
  };
};

/**
 * What run `bytes` writes under a decoder's KV caches kept on the device (`spec.deviceCache`):
 * a graph's first run writes every input; later ones leave the caches to what the graph's earlier
 * runs wrote: kept in their GPU buffers (capture: null), or fed as the previous run returned them
 * (eager), a rewind's dropped positions zeroed.
 */
const carriedBytes = (spec, bytes, previous, clearFrom) => {
  const caches = spec.deviceCache.caches; // past -> present
  return bytes.map((data, i) => {
    const input = spec.inputs[i];
    if (!previous || !(input.name in caches)) {
      return data;
    }
    if (spec.mode === 'capture') {
      return null;
    }
    const cache = previous[caches[input.name]].slice();
    if (clearFrom !== undefined) {
      zeroFrom(cache, input.dims, clearFrom);
    }
    return cache.buffer;
  });
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
  const options = {executionProviders: [asString ? 'webgpu' : {name: 'webgpu'}]};
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
    const message = String(error && error.message ? error.message : error);
    // ORT's time up to the refusal counts as the backend's, like a created session's
    const timings = {sessionMs: performance.now() - start, firstRunMs: null, medianRunMs: null};
    const status = creationStatus(capture, message);
    return {failed: {status, message, timings, captureThrew: capture}};
  }
  const entry = {session, buffers: [], graphs: new Map(), sessionMs: performance.now() - start};
  entry.sessionRecord = tracer.end();
  return {entry};
};

/** A failed run, numbered; `capture-unsupported` where the build refuses a buffer or graph. */
const runFailure = (spec, index, graph, error, prefill = false) => {
  const message = String(error && error.message ? error.message : error).replace(/\s+/g, ' ');
  const where = (prefill ? ', the prefill' : '') + (spec.graphs > 1 ? ` (gpu_graph_id ${graph})` : '');
  const failure = new Error(`run ${index + 1}${where}: ${message}`);
  // JSEP: "Registering a different external buffer under graph capture mode is not supported";
  // the C++ EP's GroupQueryAttention: "Graph capture requires past/present KV cache to share the
  // same buffer (static KV cache)" (a decoder's swapped caches)
  const refused = spec.mode === 'capture'
    && /graph capture mode is not supported|graph capture requires/i.test(message);
  failure.status = refused ? 'capture-unsupported' : 'error';
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
    let bytes = variants[variant];
    const clearFrom = spec.deviceCache && spec.deviceCache.rewinds[variant];
    if (spec.deviceCache) {
      bytes = carriedBytes(spec, bytes, lastRuns.get(graph), clearFrom);
    }
    const {feeds, fetches, readers, inputs, options} = prefill
      ? prefillArguments(entry, spec, graph, bytes)
      : runArguments(entry, spec, graph, bytes, clearFrom);
    const runOptions = options || (spec.graphs > 1 ? {extra: {gpu_graph_id: String(graph)}} : null);
    (inputs || []).forEach((buffer) => inputBuffers.add(tracer.bufferId(buffer)));
    tracer.begin('run', {dispatches: last});
    // a prefill is no capture run: no fault touches it, and it counts for none of the recording
    faults[prefill ? 'suspend' : 'startRun']();
    let results;
    try {
      results = await (runOptions
        ? entry.session.run(feeds, fetches, runOptions)
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
  if (spec.newSequence) {
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
    if (!keep) {
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
      runArguments(entry, sessionSpec, graph, variants[variant]),
    startRun: () => tracer.begin('run'),
    endRun: () => tracer.end().counts,
    output: (tensor, data) => ({type: tensor.type, dims: tensor.dims, data: toBase64(data)}),
    faults,
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

window.harness = {
  /**
   * Imports the onnxruntime-web bundle at `url` and meanwhile asks for the WebGPU adapter (no
   * page of its own for that): ORT's version, and the adapter or null. `contextModel`: the URL
   * of the page's own session's model (`contextSession`).
   */
  async load(url, contextModel) {
    const [module, adapter] = await Promise.all([import(url), adapterInfo()]);
    ort = module;
    ort.env.wasm.numThreads = 1; // threads need cross-origin isolation; WebGPU does the work
    ort.env.logLevel = 'error'; // ORT logs warnings with console.error
    contextModelUrl = contextModel;
    return {version: ort.env.versions.web, adapter};
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
    const job = runScenario(spec).catch((error) => ({
      status: 'error',
      message: String(error && error.message ? error.message : error),
      steps: [],
    }));
    const result = await withDeadline(job, timeoutMs);
    if (result.status !== 'timeout') {
      Object.assign(result, tracer.drain());
      result.deviceLost = tracer.deviceLost;
      result.aborted = result.status !== 'ok' && /\bAborted\(|\bunreachable\b/.test(result.message);
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
