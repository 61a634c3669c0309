// Reproduces one failing result with onnxruntime-web alone. repro.json lists the sessions to
// create, in the order the suite created them ("steps"), and each model with its inputs and
// onnxruntime CPU's outputs ("workloads"); the last step is the one judged, as the suite judges
// it: capture against eager, against onnxruntime CPU, against earlier layouts' outputs, replays
// against each other, and whether replays still create bind groups or write uniforms.
// Serve the folder (python3 -m http.server) and open index.html; ?faults=off runs the same
// steps without the injected fault(s) a --with-fault bundle carries.

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
const sessionOptions = (workload, mode, epAsString) => ({
  executionProviders: [epAsString ? 'webgpu' : {name: 'webgpu'}],
  freeDimensionOverrides: workload.freeDimensionOverrides,
  ...(mode === 'capture' ? {enableGraphCapture: true, preferredOutputLocation: 'gpu-buffer'} : {}),
});

const lines = [];
const say = (text) => {
  lines.push(text);
  console.log(text);
  document.getElementById('log').textContent = lines.join('\n');
};

// The suite's verdicts, most specific first (repro.json): the first that applies headlines.
let verdictOrder = ['error'];
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

/** The suite's rule (ORT-web's op-test rule): within `abs`, or a same-sign ratio within rel. */
const compare = (actual, expected, tolerance) => {
  const total = expected.data.length;
  if (!actual || !sameDims(actual.dims, expected.dims)) {
    return {ok: false, maxAbs: Infinity, mismatched: total, total};
  }
  const a = numbers(actual);
  const e = numbers(expected);
  let maxAbs = 0;
  let mismatched = 0;
  for (let i = 0; i < total; i++) {
    const same = a[i] === e[i] || (Number.isNaN(a[i]) && Number.isNaN(e[i]));
    const finite = Number.isFinite(a[i]) && Number.isFinite(e[i]);
    const diff = same ? 0 : finite ? Math.abs(a[i] - e[i]) : Infinity;
    const big = Math.max(Math.abs(a[i]), Math.abs(e[i]));
    const small = Math.min(Math.abs(a[i]), Math.abs(e[i]));
    const ratio = same ? 1 : finite && a[i] * e[i] > 0 ? big / small : Infinity;
    if (!(same || diff <= tolerance.abs || ratio <= 1 + tolerance.rel)) {
      mismatched++;
    }
    maxAbs = Math.max(maxAbs, diff);
  }
  return {ok: mismatched === 0, maxAbs, mismatched, total};
};

/** Each expected output compared; the worst max abs and whether all are within tolerance. */
const compareAll = (actual, expected, tolerance) => {
  const each = Object.fromEntries(
    Object.entries(expected).map(([name, want]) => [name, compare(actual[name], want, tolerance)]),
  );
  const values = Object.values(each);
  return {each, ok: values.every((c) => c.ok), worst: Math.max(0, ...values.map((c) => c.maxAbs))};
};

const identical = (a, b) =>
  Object.keys(a).every((name) => {
    const x = numbers(a[name]);
    const y = numbers(b[name]);
    return x.length === y.length && x.every((v, i) => Object.is(v, y[i]) || v === y[i]);
  });

/** Graph capture needs its inputs in GPU buffers on ORT's device, the same buffers every run. */
const gpuInput = (ort, spec, data) => {
  const device = ort.env.webgpu.device;
  const buffer = device.createBuffer({
    size: Math.ceil(data.byteLength / 16) * 16 || 16,
    usage: GPUBufferUsage.STORAGE | GPUBufferUsage.COPY_SRC | GPUBufferUsage.COPY_DST,
  });
  const padded = new Uint8Array(buffer.size);
  padded.set(new Uint8Array(data));
  device.queue.writeBuffer(buffer, 0, padded);
  return ort.Tensor.fromGpuBuffer(buffer, {dataType: spec.type, dims: spec.dims});
};

/** What a failed session creation means, as the suite reads it. */
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

const createSession = async (ort, workload, mode, faults) => {
  const model = new Uint8Array(await bytes(workload.model));
  const options = sessionOptions(workload, mode, faults.includes('ep-name-as-string'));
  const session = await ort.InferenceSession.create(model, options);
  const feeds = {};
  for (const spec of workload.inputs) {
    const data = await bytes(spec.bin);
    feeds[spec.name] = mode === 'capture'
      ? gpuInput(ort, spec, data)
      : new ort.Tensor(spec.type, new TYPED_ARRAYS[spec.type](data), spec.dims);
  }
  return {session, feeds};
};

/** `runs` runs of a session, every run's outputs read back; what replays asked of WebGPU. */
const runSession = async (entry, workload, runs, faults) => {
  const outputs = [];
  const replays = {bindGroups: 0, uniformWrites: 0};
  for (let i = 0; i < runs; i++) {
    const before = {...counts};
    faults?.startRun();
    const results = await entry.session.run(entry.feeds);
    faults?.endRun();
    if (i > 0) {
      replays.bindGroups += counts.bindGroups - before.bindGroups;
      replays.uniformWrites += counts.uniformWrites - before.uniformWrites;
    }
    const run = {};
    for (const name of workload.outputs) {
      const tensor = results[name];
      run[name] = {type: tensor.type, dims: tensor.dims, data: await tensor.getData()};
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
  const started = performance.now();
  try {
    if (step.reuse === null) {
      if (step.mode === 'capture') {
        api?.beginRecording(`step ${index}`, faults);
      }
      try {
        sessions[index] = await createSession(ort, workload, step.mode, faults);
      } catch (error) {
        const message = String(error && error.message ? error.message : error);
        return {status: creationStatus(step.mode === 'capture', message), message};
      }
    } else {
      sessions[index] = sessions[step.reuse];
    }
    return await runSession(sessions[index], workload, manifest.runs, api);
  } catch (error) {
    return {status: 'error', message: String(error && error.message ? error.message : error)};
  } finally {
    api?.endRecording();
    const what = step.reuse === null ? '' : ` (the session of step ${step.reuse + 1} again)`;
    say(`step ${index + 1}/${manifest.steps.length}: ${step.name}${what}: ` +
        `${((performance.now() - started) / 1000).toFixed(2)} s`);
  }
};

const fmt = (value) => (Number.isFinite(value) ? value.toPrecision(3) : String(value));

/** The suite's detectors on the judged step; every verdict that applies, with its reason. */
const judge = async (manifest, results) => {
  const tolerance = manifest.tolerance;
  const step = manifest.steps[manifest.judge.step];
  const run = results[manifest.judge.step];
  const found = [];
  if (run.status !== 'ok') {
    return [[run.status, run.message]];
  }
  const capture = step.mode === 'capture';
  const last = (r) => r.runs[r.runs.length - 1];
  const loadCpu = async (name) => Object.fromEntries(await Promise.all(
    manifest.workloads[name].cpu.map(async (spec) => [spec.name, await tensorFile(spec)])));
  const cpu = await loadCpu(step.workload);
  const eagerRun = capture ? results[manifest.judge.eager] : run;
  const eagerOk = eagerRun && eagerRun.status === 'ok';
  const vsCpu = compareAll(last(run), cpu, tolerance);
  for (const [name, c] of Object.entries(vsCpu.each)) {
    say(`output '${name}': ${step.mode} against onnxruntime CPU: max abs ${fmt(c.maxAbs)}, ` +
        `${c.mismatched}/${c.total} outside tolerance`);
  }
  if (eagerOk) {
    const eagerVsCpu = compareAll(last(eagerRun), cpu, tolerance);
    if (!eagerVsCpu.ok) {
      found.push(['reference-mismatch', `eager differs from onnxruntime CPU: max abs ${fmt(eagerVsCpu.worst)}`]);
    }
  }
  if (capture) {
    const against = eagerOk ? last(eagerRun) : null;
    const vsEager = against
      ? compareAll(last(run), against, tolerance)
      : compareAll(last(run), cpu, tolerance);
    for (const [name, c] of Object.entries(vsEager.each)) {
      say(`output '${name}': capture against ${against ? 'eager' : 'onnxruntime CPU'}: max abs ` +
          `${fmt(c.maxAbs)}, ${c.mismatched}/${c.total} outside tolerance`);
    }
    if (!vsEager.ok) {
      found.push(['capture-mismatch', `capture differs from eager: max abs ${fmt(vsEager.worst)}`]);
    }
    // An earlier layout's outputs explain the capture's better than its own: a stale replay.
    const earlier = [...new Set(manifest.steps
      .slice(0, manifest.judge.step)
      .filter((s) => s.mode === 'capture' && s.workload !== step.workload)
      .map((s) => s.workload))];
    if (!vsCpu.ok) {
      const fits = [];
      for (const [order, name] of earlier.entries()) {
        const other = compareAll(last(run), await loadCpu(name), tolerance);
        if (other.ok || other.worst < vsCpu.worst / 10) {
          fits.push([other.worst, order, manifest.workloads[name].layout]);
        }
      }
      fits.sort((a, b) => a[0] - b[0] || a[1] - b[1]);
      if (fits.length) {
        const [error, , layout] = fits[0];
        found.push(['stale-layout', `capture matches layout '${layout}''s onnxruntime CPU ` +
          `output (max abs ${fmt(error)}) better than its own (max abs ${fmt(vsCpu.worst)})`]);
      }
    }
    if (run.runs.length >= 2 && (run.replays.bindGroups || run.replays.uniformWrites)) {
      found.push(['capture-not-engaged', `replays created ${run.replays.bindGroups} bind ` +
        `groups and wrote uniforms ${run.replays.uniformWrites} times`]);
    }
  }
  const repeats = capture ? run.runs.slice(1) : run.runs;
  if (repeats.length >= 2 && !repeats.slice(1).every((r) => identical(repeats[0], r))) {
    found.push(['nondeterministic', 'runs of the same input gave different outputs']);
  }
  return found;
};

const main = async () => {
  if (typeof GPUDevice === 'undefined' || !navigator.gpu) {
    return {verdicts: ['error'], message: 'this browser offers no WebGPU (navigator.gpu)'};
  }
  installCounters();
  if (faultsOn && FAULT_SCRIPT) {
    window.__webgpuTracer = {bindGroupRewriters: rewriters}; // where faults.js hooks in
    await import(FAULT_SCRIPT);
  }
  const manifest = await (await fetch('repro.json')).json();
  verdictOrder = manifest.verdictOrder;
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
  const sessions = [];
  const results = [];
  for (const [index, step] of manifest.steps.entries()) {
    results[index] = await runStep(ort, manifest, step, index, sessions);
  }
  const found = await judge(manifest, results);
  const verdicts = found.map(([verdict]) => verdict);
  for (const [verdict, why] of found) {
    say(`${verdict}: ${why}`);
  }
  return {verdicts, message: found.map(([, why]) => why).join('; ')};
};

/** Shows the headline verdict (PASS when none applies), also as `window.reproResult`. */
const finish = ({verdicts, message}) => {
  const verdict = verdictOrder.find((v) => verdicts.includes(v)) || 'pass';
  if (verdict === 'error') {
    say(`error: ${message}`);
  }
  document.title = verdict === 'pass' ? 'PASS' : `FAIL: ${verdict}`;
  say(document.title);
  const faults = faultsOn ? FAULTS : [];
  const unique = [...new Set(verdicts)].sort();
  window.reproResult = {verdict, verdicts: unique, message, faults, lines};
};

const failure = (error) => ({
  verdicts: ['error'],
  message: String(error && error.message ? error.message : error),
});

main().catch(failure).then(finish);
