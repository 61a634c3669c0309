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
//
// input-snapshot-at-capture: while a capture session records, a bind group that binds one of the
// session's input buffers (every build binds the application's GPU buffer itself, measured) gets
// a copy of that buffer taken then instead, so every replay computes the recording run's inputs
// again whatever the application wrote since: what the C++ builds do with a new input buffer per
// run (stale-input).
//
// lengths-frozen-at-capture (a decoder's): as input-snapshot-at-capture, for the attention mask
// alone, which seqlens_k and total_sequence_length come from: every replayed decode step
// attends over the capture step's length while its token and caches are new.
//
// cache-frozen-at-capture (a decoder's): while a capture session records, a bind group binding
// one of its KV-cache buffers (past_key_values.*, which its present cache is written into in
// place) gets a twin buffer instead. Before every run of the session the twin is set back to the
// cache as the recording run was fed it, and after the run what the graph wrote into the twin is
// copied to the application's buffer: every replay reads the capture step's cache, never
// advanced, and returns it with its own step's keys and values added (what wgpu's fault does).
//
// graphs-share-inputs: while a capture session records a graph other than its first
// (gpu_graph_id), a bind group that binds one of that graph's input buffers gets the first
// graph's buffer of the same input instead, so the graph replays on the first graph's inputs
// and returns its result (wrong-graph).
(() => {
  const STALE_UNIFORM_BINDING = 'stale-uniform-binding';
  const INPUT_SNAPSHOT_AT_CAPTURE = 'input-snapshot-at-capture';
  const GRAPHS_SHARE_INPUTS = 'graphs-share-inputs';
  const LENGTHS_FROZEN_AT_CAPTURE = 'lengths-frozen-at-capture';
  const CACHE_FROZEN_AT_CAPTURE = 'cache-frozen-at-capture';
  // What the decoder faults freeze: the inputs whose names start so (as wgpu's FROZEN_INPUTS).
  const FROZEN_INPUTS = {
    [LENGTHS_FROZEN_AT_CAPTURE]: 'attention_mask',
    [CACHE_FROZEN_AT_CAPTURE]: 'past_key_values.',
  };
  const UNIFORM = 0x40; // GPUBufferUsage.UNIFORM

  // session name -> {uniforms: Map(`${program}#${occurrence}/${slot}` -> {bytes}), copies}, in
  // the order the captures recorded: the earliest alive capture is where a stale entry comes from.
  const captured = new Map();
  let recording = null; // the capture session recording now (see beginRecording)
  let suspended = null; // the recording a run outside capture set aside (suspend)
  // input buffer -> {session, graph, slot, first graph, name}, as the harness made them (`inputs`)
  const inputOf = new WeakMap();
  const graphInputs = new Map(); // session -> Map(graph -> the graph's first input buffers)
  // session -> [{buffer, pristine, twin}] (cache-frozen-at-capture), kept after recording
  const twins = new Map();

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

  /** A buffer of the fault's own the size of `buffer`, a copy of it (queued after its writes). */
  const copyOf = (device, buffer, encoder) => {
    const copy = device.createBuffer({
      size: buffer.size,
      usage: GPUBufferUsage.STORAGE | GPUBufferUsage.COPY_SRC | GPUBufferUsage.COPY_DST,
    });
    encoder.copyBufferToBuffer(buffer, 0, copy, 0, buffer.size);
    recording.copies.push(copy);
    return copy;
  };

  /** A copy of `buffer` as it holds now, made once per recording. */
  const snapshot = (device, buffer) => {
    if (!recording.snapshots.has(buffer)) {
      const encoder = device.createCommandEncoder();
      recording.snapshots.set(buffer, copyOf(device, buffer, encoder));
      device.queue.submit([encoder.finish()]);
    }
    return recording.snapshots.get(buffer);
  };

  /** The twin bound for a KV-cache buffer (cache-frozen-at-capture), made once per recording. */
  const twin = (device, buffer) => {
    if (!recording.snapshots.has(buffer)) {
      const encoder = device.createCommandEncoder();
      const entry = {
        device,
        buffer,
        pristine: copyOf(device, buffer, encoder),
        twin: copyOf(device, buffer, encoder),
      };
      device.queue.submit([encoder.finish()]);
      recording.snapshots.set(buffer, entry.twin);
      twins.set(recording.session, [...(twins.get(recording.session) || []), entry]);
    }
    return recording.snapshots.get(buffer);
  };

  /** Whether a decoder fault of the recording session freezes input `name`. */
  const frozen = (fault, name) => recording.faults.has(fault) && name.startsWith(FROZEN_INPUTS[fault]);

  /** What an input buffer of the recording session is bound as, under the input faults. */
  const inputStandIn = (device, buffer) => {
    const input = inputOf.get(buffer);
    if (!input || input.session !== recording.session) {
      return null;
    }
    if (recording.faults.has(GRAPHS_SHARE_INPUTS) && input.graph !== input.first) {
      return graphInputs.get(input.session).get(input.first)[input.slot];
    }
    if (frozen(CACHE_FROZEN_AT_CAPTURE, input.name)) {
      return twin(device, buffer);
    }
    const snapshotted = recording.faults.has(INPUT_SNAPSHOT_AT_CAPTURE);
    if (snapshotted || frozen(LENGTHS_FROZEN_AT_CAPTURE, input.name)) {
      return snapshot(device, buffer);
    }
    return null;
  };

  const rewriteInputs = (device, descriptor) => {
    let swapped = false;
    const entries = (descriptor.entries || []).map((entry) => {
      const resource = entry.resource;
      const buffer = resource instanceof GPUBuffer ? resource : resource && resource.buffer;
      const standIn = buffer instanceof GPUBuffer && inputStandIn(device, buffer);
      if (!standIn) {
        return entry;
      }
      swapped = true;
      const binding = resource instanceof GPUBuffer ? {buffer: standIn} : {...resource, buffer: standIn};
      return {binding: entry.binding, resource: binding};
    });
    return swapped ? {...descriptor, entries} : descriptor;
  };

  const rewrite = (device, descriptor) => {
    if (recording) {
      descriptor = rewriteInputs(device, descriptor);
    }
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
    graphInputs.delete(session);
    twins.delete(session);
    for (const buffer of (captured.get(session) || {copies: []}).copies) {
      buffer.destroy();
    }
    captured.delete(session);
  };

  const faults = {
    /**
     * A capture session starts recording; `names` are the faults of its case. It records for
     * `runs` runs: at least two (the C++ EP captures the first run; JSEP was said to run one
     * regular run first and capture the second), and every graph's first run.
     */
    beginRecording(session, names, runs = 2) {
      // A scenario's session records again (another graph, JSEP's capture run after its first
      // run): what its earlier recordings bound stays bound, until `forget`.
      const earlier = captured.get(session) || {uniforms: new Map(), copies: []};
      captured.delete(session);
      recording = {
        session,
        faults: new Set(names),
        runs: 0,
        recordingRuns: runs,
        run: {occurrences: new Map(), uniforms: new Map()}, // key -> {bytes}, this run
        uniforms: earlier.uniforms, // key -> {bytes}: the last run that made bind groups
        copies: earlier.copies, // the fault's buffers this session binds
        snapshots: new Map(), // input buffer -> what the input faults bind in its place
      };
    },
    /**
     * The harness made `buffers`, the inputs of graph `graph` of capture session `session`, for
     * the inputs named `names`.
     */
    inputs(session, graph, buffers, names) {
      if (!graphInputs.has(session)) {
        graphInputs.set(session, new Map());
      }
      const graphs = graphInputs.get(session);
      if (!graphs.has(graph)) {
        graphs.set(graph, buffers);
      }
      const first = graphs.keys().next().value;
      buffers.forEach((buffer, slot) => {
        inputOf.set(buffer, {session, graph, slot, first, name: names[slot]});
      });
    },
    /** A run outside capture starts (a decoder's prefill): no fault touches it. */
    suspend() {
      suspended = recording;
      recording = null;
    },
    /** That run ended: the recording, if any, goes on. */
    resume() {
      recording = suspended;
      suspended = null;
    },
    /** A run of the session starts. */
    startRun() {
      if (recording) {
        recording.run = {occurrences: new Map(), uniforms: new Map()};
      }
    },
    /**
     * A run of session `session` ended: its KV-cache twins hand what the graph wrote to the
     * application's buffers and go back to the capture step's cache; the recording keeps the
     * run's uniforms if it made bind groups (a replay makes none).
     */
    endRun(session) {
      for (const {device, buffer, pristine, twin: copy} of twins.get(session) || []) {
        const encoder = device.createCommandEncoder();
        encoder.copyBufferToBuffer(copy, 0, buffer, 0, buffer.size);
        encoder.copyBufferToBuffer(pristine, 0, copy, 0, buffer.size);
        device.queue.submit([encoder.finish()]);
      }
      if (!recording) {
        return;
      }
      if (recording.run.uniforms.size) {
        recording.uniforms = recording.run.uniforms;
      }
      if (++recording.runs === recording.recordingRuns) {
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
      // its graphs' inputs, and its KV-cache twins (every run uses them), stay known until `forget`
      captured.set(session, {uniforms, copies});
    },
    forget,
  };

  if (window.__webgpuTracer) {
    window.__webgpuTracer.bindGroupRewriters.push(rewrite);
  }
  Object.defineProperty(window, '__webgpuFaults', {value: faults});
})();
