// Injectable faults at the WebGPU API level, added by Playwright as an init script after
// tracer.js. Each fault is off until the harness arms it for one case (its spec's `faults`,
// from Python), so a fault never reaches a case that did not name it.
//
// stale-uniform-binding (the seed's bug, onnxruntime#29594): while a capture session records,
// every bind group whose program matches one that an earlier, still-alive capture session
// recorded gets that earlier bind group's uniform buffer in place of its own. The captured graph
// replays the bind groups it recorded, so every run reads the earlier layout's constants (e.g.
// LayerNormalization's epsilon): silent and deterministic. What is bound is a copy of the earlier
// uniform's bytes as they were when that bind group was made: JSEP reuses a uniform buffer for
// later dispatches and sessions (measured), so the live buffer may hold anything by then.
(() => {
  const STALE_UNIFORM_BINDING = 'stale-uniform-binding';
  const UNIFORM = 0x40; // GPUBufferUsage.UNIFORM

  // session name -> {uniforms: Map(`${program}#${occurrence}/${slot}` -> {bytes}), copies}, in
  // the order the captures recorded: the earliest alive capture is where a stale entry comes from.
  const captured = new Map();
  let recording = null; // the capture session recording now (see beginRecording)
  // Which run records: the C++ EP captures the first run; JSEP runs one regular run first and
  // captures the second. So recording spans two runs and keeps the last that made bind groups.
  const RECORDING_RUNS = 2;

  // A program is its compiled pipeline: ORT caches pipelines by program key (name, shapes,
  // attributes baked into the shader), so two sessions of one model share them, while a label
  // alone ("Transpose") covers programs of other shapes. Bind group layouts lead back to it.
  const pipelineOfLayout = new WeakMap(); // bind group layout -> its pipeline's serial
  const pipelineSerials = new WeakMap();
  let pipelines = 0;
  if (typeof GPUComputePipeline !== 'undefined') {
    const getBindGroupLayout = GPUComputePipeline.prototype.getBindGroupLayout;
    GPUComputePipeline.prototype.getBindGroupLayout = function (...args) {
      const layout = getBindGroupLayout.apply(this, args);
      if (!pipelineSerials.has(this)) {
        pipelineSerials.set(this, ++pipelines);
      }
      pipelineOfLayout.set(layout, pipelineSerials.get(this));
      return layout;
    };
  }

  // uniform buffer -> its bytes as last written, so a capture's uniforms can be copied later
  const contents = new WeakMap();
  const writeBuffer = typeof GPUQueue === 'undefined' ? null : GPUQueue.prototype.writeBuffer;
  if (writeBuffer) {
    GPUQueue.prototype.writeBuffer = function (buffer, bufferOffset, data, dataOffset = 0, size) {
      if (recording && buffer instanceof GPUBuffer && buffer.usage & UNIFORM) {
        const unit = data.BYTES_PER_ELEMENT || 1;
        const bytes = ArrayBuffer.isView(data)
          ? new Uint8Array(data.buffer, data.byteOffset, data.byteLength)
          : new Uint8Array(data);
        const start = dataOffset * unit;
        const end = size === undefined ? bytes.length : start + size * unit;
        if (!contents.has(buffer)) {
          contents.set(buffer, new Uint8Array(buffer.size));
        }
        contents.get(buffer).set(bytes.subarray(start, end), bufferOffset);
      }
      return writeBuffer.apply(this, arguments);
    };
  }

  const uniformBinding = (entry) => {
    const resource = entry.resource;
    const buffer = resource instanceof GPUBuffer ? resource : resource && resource.buffer;
    if (!(buffer instanceof GPUBuffer) || !(buffer.usage & UNIFORM)) {
      return null;
    }
    const offset = (resource && resource.offset) || 0;
    return {buffer, offset, size: (resource && resource.size) ?? buffer.size - offset};
  };

  /** The same slot of the same occurrence of the program in the earliest alive capture. */
  const earlierBinding = (key, size) => {
    for (const [session, {uniforms}] of captured) {
      const earlier = session !== recording.session && uniforms.get(key);
      if (earlier && earlier.bytes.length === size) {
        return earlier;
      }
    }
    return null;
  };

  /** A uniform buffer of the fault's own holding `bytes`, kept until the session is released. */
  const staleCopy = (device, bytes) => {
    const buffer = device.createBuffer({
      size: Math.ceil(bytes.length / 16) * 16,
      usage: GPUBufferUsage.UNIFORM | GPUBufferUsage.COPY_DST,
    });
    writeBuffer.call(device.queue, buffer, 0, bytes);
    recording.copies.push(buffer);
    return {buffer, offset: 0, size: bytes.length};
  };

  const rewrite = (device, descriptor) => {
    // ORT labels bind groups (or their layouts) with the program's name; unlabeled: no match.
    const label = descriptor.label || (descriptor.layout && descriptor.layout.label) || '';
    if (!recording || !label) {
      return descriptor;
    }
    const program = `${label}@${pipelineOfLayout.get(descriptor.layout) ?? '?'}`;
    const {occurrences, uniforms} = recording.run;
    const occurrence = occurrences.get(program) || 0;
    occurrences.set(program, occurrence + 1);
    const stale = recording.faults.has(STALE_UNIFORM_BINDING);
    let swapped = false;
    const entries = (descriptor.entries || []).map((entry) => {
      const binding = uniformBinding(entry);
      if (!binding) {
        return entry;
      }
      const key = `${program}#${occurrence}/${entry.binding}`;
      // ORT writes a uniform just before binding it, and may reuse its buffer for the next
      // dispatch: its bytes now are the ones this bind group reads.
      const written = contents.get(binding.buffer);
      if (written) {
        uniforms.set(key, {bytes: written.slice(binding.offset, binding.offset + binding.size)});
      }
      const earlier = stale && earlierBinding(key, binding.size);
      if (!earlier) {
        return entry;
      }
      swapped = true;
      return {binding: entry.binding, resource: staleCopy(device, earlier.bytes)};
    });
    return swapped ? {...descriptor, entries} : descriptor;
  };

  /**
   * A session was released, or failed while recording: its copies go with it, and no later
   * capture copies its uniforms.
   */
  const forget = (session) => {
    if (recording && recording.session === session) {
      faults.endRecording();
    }
    for (const buffer of (captured.get(session) || {copies: []}).copies) {
      buffer.destroy();
    }
    captured.delete(session);
  };

  const faults = {
    /** A capture session starts recording; `names` are the faults of its case. */
    beginRecording(session, names) {
      recording = {
        session,
        faults: new Set(names),
        runs: 0,
        run: {occurrences: new Map(), uniforms: new Map()}, // key -> {bytes}, this run
        uniforms: new Map(), // key -> {bytes}: the last run that made bind groups
        copies: [], // the fault's buffers this session binds
      };
    },
    /** A run of the session starts. */
    startRun() {
      if (recording) {
        recording.run = {occurrences: new Map(), uniforms: new Map()};
      }
    },
    /** A run ended: keep its uniforms if it made bind groups (a replay makes none). */
    endRun() {
      if (!recording) {
        return;
      }
      if (recording.run.uniforms.size) {
        recording.uniforms = recording.run.uniforms;
      }
      if (++recording.runs === RECORDING_RUNS) {
        faults.endRecording();
      }
    },
    /** Recording is over (its recording runs ended, or the case failed); safe to repeat. */
    endRecording() {
      if (!recording) {
        return;
      }
      const {session, uniforms, copies} = recording;
      recording = null;
      forget(session);
      captured.set(session, {uniforms, copies});
    },
    forget,
  };

  if (window.__webgpuTracer) {
    window.__webgpuTracer.bindGroupRewriters.push(rewrite);
  }
  Object.defineProperty(window, '__webgpuFaults', {value: faults});
})();
