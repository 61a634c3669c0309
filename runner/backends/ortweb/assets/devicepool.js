// What explore's examples, each on a new onnxruntime-web instance (harness.js `renew`), share in
// one page: injected by Playwright before the tracer (context.add_init_script; explore's backend
// only, BackendOptions.fresh_sequences) and idle until the page enables it (harness.js `load`).
// Each device request of an instance gets one of the page's pooled devices for that descriptor
// that the instance did not get yet, a new one where there is none. A pooled device's `destroy`
// is a real one while an example's steps run (`stepping`: a scenario that releases every
// session makes onnxruntime-web destroy its device, then read or dispose what it still holds,
// and ask for a device again, as in a page of its own; the destroyed device leaves the pool),
// and a no-op after them, when nothing the example reports can see it (its clean-up, or `renew`
// releasing the instance's sessions). On a pooled device every shader module, bind group
// layout, pipeline layout and compute pipeline is made once per content, and every wasm module
// is compiled once per URL. What an instance shares is what a pure function of its descriptor
// makes, so an example's verdict does not depend on the examples before it (tests/test_ortweb.py,
// tests/test_scenarios.py), while SwiftShader compiles each program once per pooled device
// instead of once per example (docs/commands.md, "Where an ort-web example's time goes"). The
// tracer, injected after this, still sees (and counts) every call onnxruntime-web makes.
(() => {
  if (typeof GPUDevice === 'undefined' || window.__devicePool) {
    return;
  }
  let enabled = false;
  let stepping = false; // an example's steps are running: a destroy is real
  const given = new Set(); // the pooled devices the current instance got
  const pool = {
    devices: 0, destroyed: 0, made: 0, reused: 0, wasmCompiled: 0, wasmReused: 0,
    /** From now on, for this page. */
    enable() {
      enabled = true;
    },
    /** A new instance: each of its device requests gets a pooled device it did not get yet. */
    renewed() {
      given.clear();
    },
    /** Whether an example's steps are running (`on`), or it is past them. */
    stepping(on) {
      stepping = on;
    },
  };
  Object.defineProperty(window, '__devicePool', {value: pool});

  const devices = new Map(); // descriptor as JSON -> its pooled devices alive, oldest first
  const made = new WeakMap(); // device -> Map(kind + content -> object)
  const contentOf = new WeakMap(); // object made here -> its key
  // an object's key for a descriptor naming it: 'auto' and absent stand for themselves; one this
  // pool did not make has none (its identity is unknown), and neither has what names it
  const UNKNOWN = Symbol('unknown');
  const keyOf = (object) => (object === 'auto' || object === undefined ? String(object) : contentOf.get(object) ?? UNKNOWN);
  const known = (...keys) => (keys.includes(UNKNOWN) ? null : JSON.stringify(keys));

  const requestDevice = GPUAdapter.prototype.requestDevice;
  GPUAdapter.prototype.requestDevice = async function (descriptor) {
    if (!enabled) {
      return requestDevice.call(this, descriptor);
    }
    const key = JSON.stringify(descriptor || {});
    if (!devices.has(key)) {
      devices.set(key, []);
    }
    const alive = devices.get(key);
    let pooled = alive.find((device) => !given.has(device));
    if (!pooled) {
      pooled = requestDevice.call(this, descriptor).then((device) => {
        // onnxruntime-web destroys its device with its last session; a later request gets
        // this one again unless an example's steps destroyed it (a lost one is the page's end:
        // page.py)
        const destroy = device.destroy;
        device.destroy = function () {
          if (!stepping) {
            return;
          }
          const at = alive.indexOf(pooled);
          if (at >= 0) {
            alive.splice(at, 1);
            pool.destroyed++;
          }
          destroy.call(this);
        };
        made.set(device, new Map());
        pool.devices++;
        return device;
      });
      alive.push(pooled);
    }
    given.add(pooled);
    return pooled;
  };

  /** `GPUDevice.prototype[method]` answering from what the device made for the same content. */
  const byContent = (method, kind, content) => {
    const original = GPUDevice.prototype[method];
    GPUDevice.prototype[method] = function (descriptor) {
      const memo = made.get(this);
      const text = memo && content(descriptor);
      if (!text) {
        return original.call(this, descriptor);
      }
      const key = `${kind}:${text}`;
      const async = method.endsWith('Async');
      if (memo.has(key)) {
        pool.reused++;
        return async ? Promise.resolve(memo.get(key)) : memo.get(key);
      }
      pool.made++;
      const keep = (object) => {
        memo.set(key, object);
        contentOf.set(object, key);
        return object;
      };
      return async ? original.call(this, descriptor).then(keep) : keep(original.call(this, descriptor));
    };
  };
  // labels too: the tracer names a dispatch's pipeline by its label
  byContent('createShaderModule', 'module', (d) => known(d.label ?? null, d.code));
  byContent('createBindGroupLayout', 'group-layout', (d) => known(d.label ?? null, d.entries));
  byContent('createPipelineLayout', 'layout', (d) => known(d.label ?? null, ...d.bindGroupLayouts.map(keyOf)));
  const pipeline = (d) => known(d.label ?? null, keyOf(d.layout), keyOf(d.compute.module),
    d.compute.entryPoint ?? null, d.compute.constants ?? null);
  byContent('createComputePipeline', 'pipeline', pipeline);
  byContent('createComputePipelineAsync', 'pipeline', pipeline);

  // onnxruntime-web instantiates its wasm with instantiateStreaming(fetch(url)): compiled once
  const compiled = new Map(); // url -> Promise<WebAssembly.Module>
  const instantiateStreaming = WebAssembly.instantiateStreaming;
  WebAssembly.instantiateStreaming = async function (source, imports) {
    const response = await source;
    if (!enabled || !response.url) {
      return instantiateStreaming.call(WebAssembly, response, imports);
    }
    if (compiled.has(response.url)) {
      pool.wasmReused++;
      response.body?.cancel(); // unread, its 20 MB would stay in flight until collected
    } else {
      pool.wasmCompiled++;
      compiled.set(response.url, WebAssembly.compileStreaming(response));
    }
    const module = await compiled.get(response.url);
    return {module, instance: await WebAssembly.instantiate(module, imports)};
  };
})();
