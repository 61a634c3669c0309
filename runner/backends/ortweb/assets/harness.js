// The page side of the ort-web backend: loads one onnxruntime-web bundle, then runs cases that
// Python hands it. A case creates a session, runs it `runs` times (eager: CPU tensors; capture:
// GPU tensors, graph capture on), reads every run's outputs back and reports timings and the
// tracer's records. Sessions stay alive in `sessions` until the next sequence begins, so later
// cases run next to earlier ones and a revisit can replay an earlier capture (layout-change
// sequences).
// A case's `faults` (faults.js) are armed only while its own capture session records.
const tracer = window.__webgpuTracer;
const faults = window.__webgpuFaults;
const sessions = new Map(); // `${key}/${mode}` -> {session, feeds, buffers, ...}
// Sessions of the previous sequence, released once the next case has its own session: the C++
// EP builds tear down their WebGPU context (program cache included) with the last session, and
// building it again costs about 1.6 s on SwiftShader; JSEP keeps its backend for the page anyway.
let retired = [];
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

const releaseEntry = async (entry) => {
  await entry.session.release();
  for (const buffer of entry.buffers) {
    buffer.destroy();
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

/** A new sequence begins: earlier sessions leave `sessions` (and faults) now, the GPU later. */
const retireSessions = () => {
  for (const [name, entry] of sessions) {
    faults.forget(name);
    retired.push(entry);
  }
  sessions.clear();
  fetched.clear();
};

const releaseRetired = async () => {
  const entries = retired;
  retired = [];
  for (const entry of entries) {
    await releaseEntry(entry);
  }
};

/** Graph capture needs inputs in GPU buffers on ORT's device, the same buffers every run. */
const gpuInput = (device, input, bytes, buffers) => {
  const buffer = device.createBuffer({
    size: Math.ceil(bytes.byteLength / 16) * 16 || 16,
    usage: GPUBufferUsage.STORAGE | GPUBufferUsage.COPY_SRC | GPUBufferUsage.COPY_DST,
  });
  buffers.push(buffer);
  const padded = new Uint8Array(buffer.size);
  padded.set(new Uint8Array(bytes));
  device.queue.writeBuffer(buffer, 0, padded);
  return ort.Tensor.fromGpuBuffer(buffer, {dataType: input.type, dims: input.dims});
};

/** What a failed session creation means: capture refused, an op missing, or an error. */
const creationStatus = (capture, message) => {
  if (capture && /capture/i.test(message)) {
    return 'capture-unsupported';
  }
  if (/could not find an implementation|not implemented|unsupported op|no op registered/i
      .test(message)) {
    return 'unsupported-op';
  }
  return 'error';
};

/**
 * Creates the case's session and its input tensors: an entry of `sessions`, or a result that
 * says why there is no session. Capture inputs live in GPU buffers made here, kept with the
 * session: a captured graph replays on the buffers it recorded with.
 */
const createSession = async (spec) => {
  const capture = spec.mode === 'capture';
  const [model, ...inputBytes] = await Promise.all(
    [spec.model, ...spec.inputs.map((input) => input.url)].map(fetchBytes),
  );
  // The EP as an object, not the string 'webgpu': the C++ EP builds (ort.webgpu.mjs,
  // ort.jspi.mjs) pass enableGraphCapture on to the EP only then, and otherwise run a capture
  // session uncaptured without a word. JSEP takes either form.
  // Fault `ep-name-as-string` passes it the other way, as users easily do (backend.FAULTS).
  const asString = (spec.faults || []).includes('ep-name-as-string');
  const options = {
    executionProviders: [asString ? 'webgpu' : {name: 'webgpu'}],
    freeDimensionOverrides: spec.freeDimensionOverrides,
  };
  if (capture) {
    Object.assign(options, {enableGraphCapture: true, preferredOutputLocation: 'gpu-buffer'});
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
    return {failed: {status: creationStatus(capture, message), message, timings}};
  }
  const entry = {session, buffers: [], feeds: {}, sessionMs: performance.now() - start};
  entry.sessionRecord = tracer.end();

  const device = ort.env.webgpu.device;
  tracer.begin('inputs');
  spec.inputs.forEach((input, i) => {
    entry.feeds[input.name] = capture
      ? gpuInput(device, input, inputBytes[i], entry.buffers)
      : new ort.Tensor(input.type, new TYPED_ARRAYS[input.type](inputBytes[i]), input.dims);
  });
  entry.inputBuffers = entry.buffers.map((buffer) => tracer.bufferId(buffer));
  tracer.end();
  return {entry};
};

/** Runs a session `spec.runs` times; every run's outputs read back, the last run's dispatches. */
const runSession = async (entry, spec) => {
  const runs = [];
  const records = [];
  const times = [];
  const outputBuffers = [];
  for (let i = 0; i < spec.runs; i++) {
    const last = i === spec.runs - 1;
    tracer.begin('run', {dispatches: last});
    const start = performance.now();
    faults.startRun();
    const results = await entry.session.run(entry.feeds);
    faults.endRun();
    const ran = performance.now() - start;
    records.push(tracer.end());
    // A run is timed until its outputs are on the host, as an eager run's are when
    // session.run returns (and wgpu's runs are); a capture run's stay on the GPU until getData,
    // which waits for the run's GPU work.
    tracer.begin('readback');
    const readStart = performance.now();
    const tensors = [];
    for (const outputName of spec.outputNames) {
      const tensor = results[outputName];
      if (!tensor) {
        throw new Error(`the session has no output named ${outputName}`);
      }
      if (last && tensor.location === 'gpu-buffer') {
        outputBuffers.push(tracer.bufferId(tensor.gpuBuffer));
      }
      tensors.push([outputName, tensor, await tensor.getData()]);
    }
    times.push(ran + performance.now() - readStart);
    tracer.end();
    const outputs = {};
    for (const [outputName, tensor, data] of tensors) {
      outputs[outputName] = {type: tensor.type, dims: tensor.dims, data: toBase64(data)};
    }
    runs.push(outputs);
  }
  return {runs, records, outputBuffers, times};
};

/**
 * One case. `spec.reuseSession` (a revisit) runs the session an earlier case of the same
 * workload and mode left alive, so its runs replay the earlier capture; otherwise, or if that
 * session is gone, a new session replaces any earlier one of the same name.
 */
const runCase = async (spec) => {
  if (spec.newSequence) {
    retireSessions();
  }
  const name = `${spec.key}/${spec.mode}`;
  let entry = spec.reuseSession ? sessions.get(name) : undefined;
  const reused = entry !== undefined;
  if (!reused) {
    await releaseSession(name);
    if (spec.mode === 'capture') {
      faults.beginRecording(name, spec.faults);
    }
    const created = await createSession(spec);
    await releaseRetired(); // ORT's context lives on in the new session
    if (created.failed) {
      faults.forget(name);
      return created.failed;
    }
    entry = created.entry;
    sessions.set(name, entry);
  }
  const {runs, records, outputBuffers, times} = await runSession(entry, spec);
  return {
    status: 'ok',
    message: '',
    reusedSession: reused,
    runs,
    records,
    sessionRecord: reused ? {label: 'session', counts: {}} : entry.sessionRecord,
    inputBuffers: entry.inputBuffers,
    outputBuffers,
    timings: {
      sessionMs: reused ? null : entry.sessionMs,
      firstRunMs: times[0],
      medianRunMs: median(times.slice(1)),
    },
  };
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
   * page of its own for that): ORT's version, and the adapter or null.
   */
  async load(url) {
    const [module, adapter] = await Promise.all([import(url), adapterInfo()]);
    ort = module;
    ort.env.wasm.numThreads = 1; // threads need cross-origin isolation; WebGPU does the work
    ort.env.logLevel = 'error'; // ORT logs warnings with console.error
    return {version: ort.env.versions.web, adapter};
  },
  /**
   * Runs one case; returns its result as JSON text: one protocol round trip per case, and
   * Playwright hands over one string much faster than a tree of small objects.
   */
  async run(spec, timeoutMs) {
    const job = runCase(spec)
      .catch((error) => ({
        status: 'error',
        message: String(error && error.message ? error.message : error),
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
    }
    return JSON.stringify(result);
  },
  sessionNames() {
    return [...sessions.keys()];
  },
};
