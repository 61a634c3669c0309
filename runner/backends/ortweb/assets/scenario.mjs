// A scenario's steps (runner/scenario) on onnxruntime-web: the suite's page (harness.js) and a
// scenario's repro bundle (repro.mjs) both run them here, so a bundle replays exactly what the
// suite ran. Each page says how it makes sessions and feeds (`page`, below).

// An op the build does not run. JSEP refuses some attributes only when the kernel runs
// (AveragePool's ceil_mode: "using ceil() in shape computation is not yet supported", "is not
// yet implemented"): a refusal, as a missing kernel is, not a crash.
const LACKS_KERNEL =
  /could not find an implementation|not (yet )?implemented|not yet supported|unsupported op|no op registered/i;

/** What a failed session creation means: capture refused, an op missing, or an error. */
export const creationStatus = (capture, message) => {
  if (capture && /capture/i.test(message)) {
    return 'capture-unsupported';
  }
  return LACKS_KERNEL.test(message) ? 'unsupported-op' : 'error';
};

/** What a failed run means: capture refused (JSEP: "Registering a different external buffer
 * under graph capture mode is not supported"; the C++ EP's GroupQueryAttention: "Graph capture
 * requires past/present KV cache to share the same buffer", a decoder's swapped caches; its
 * MultiHeadAttention: "Graph capture not implemented for non flash attention path"), an op
 * missing, or an error. */
export const runStatus = (capture, message) => {
  if (capture && /graph capture (mode is not supported|requires|not implemented)/i.test(message)) {
    return 'capture-unsupported';
  }
  return LACKS_KERNEL.test(message) ? 'unsupported-op' : 'error';
};

/** The name a scenario's session has in the page (and its faults). */
export const sessionName = (session) => `scenario/${session}`;

const text = (error) => String(error && error.message ? error.message : error).replace(/\s+/g, ' ');

/**
 * Runs `spec.steps` over the sessions `spec.sessions` names, each created by its first step; a
 * run writes its inputs as the step says and reads its outputs, disposing them unless it holds
 * them. Returns every step's outputs and WebGPU call counts; a step that throws ends the
 * scenario with its number (`failedStep`). Everything is released at the end, held outputs
 * included; where that throws after every step finished (disposing an output held past its
 * session's release traps the C++ builds), the scenario is an error of its clean-up, named so,
 * with every step reported (no `failedStep`). `page` is the page's own:
 *   sessionSpec(step, session): what its createSession and runArguments take for the step;
 *   createSession(sessionSpec): {entry} (entry.session an InferenceSession) or {failed};
 *   releaseEntry(entry); runArguments(entry, sessionSpec, graph, variant): {feeds, fetches,
 *   readers}; startRun() and endRun() around a run, endRun giving its WebGPU call counts
 *   ({createBindGroup, uniformWrites}); output(tensor, data): a run's output as reported;
 *   faults: faults.js's API, or undefined where no fault is injected; quiet(), optional: from here
 *   the scenario reports nothing, it only releases its sessions. A capture session's
 *   `sessionSpec.faults` are armed for its first two runs of each graph since it was created,
 *   as for a case's session: the run that records (the C++ builds record the first, JSEP the
 *   second) and no other.
 */
export const runScenarioSteps = async (spec, page) => {
  const live = new Map(); // session name -> entry
  const held = new Map(); // session name -> its held output tensors
  const steps = [];
  const runsOf = new Map(); // `${session}/${graph}` -> its runs since the session's creation
  const dispose = (name) => {
    for (const tensor of held.get(name) || []) {
      tensor.dispose();
    }
    held.delete(name);
  };
  let cleanUpError = null; // what the final clean-up threw, naming what it was doing
  const cleanUp = async () => {
    for (const name of [...held.keys()]) {
      try {
        dispose(name);
      } catch (error) {
        held.delete(name);
        cleanUpError = cleanUpError || `disposing the outputs ${name} held: ${text(error)}`;
      }
    }
    page.quiet?.();
    for (const entry of live.values()) {
      await page.releaseEntry(entry).catch(() => {});
    }
    Object.keys(spec.sessions).forEach((name) => page.faults?.forget(sessionName(name)));
  };
  let report;
  try {
    report = await runSteps(spec, page, {live, held, steps, runsOf, dispose});
  } finally {
    await cleanUp();
  }
  if (cleanUpError && report.status === 'ok') {
    const message = `the clean-up after the last step failed, ${cleanUpError}`;
    return {status: 'error', message, steps, cleanUp: true};
  }
  return report;
};

/** The steps of `runScenarioSteps`, over its state; its report, with `failedStep` on a failure. */
const runSteps = async (spec, page, {live, held, steps, runsOf, dispose}) => {
  for (const [i, step] of spec.steps.entries()) {
    const session = spec.sessions[step.session];
    const sessionSpec = page.sessionSpec(step, session);
    let running = false;
    try {
      if (step.action === 'create' || (step.action === 'run' && !live.has(step.session))) {
        const created = await page.createSession(sessionSpec);
        if (created.failed) {
          return {...created.failed, steps, failedStep: i};
        }
        live.set(step.session, created.entry);
        [...runsOf.keys()].filter((k) => k.startsWith(`${step.session}/`)).forEach((k) => runsOf.delete(k));
      }
      if (step.action === 'dispose') {
        dispose(step.session);
      } else if (step.action === 'release') {
        page.faults?.forget(sessionName(step.session));
        await page.releaseEntry(live.get(step.session));
        live.delete(step.session);
      }
      if (step.action !== 'run') {
        steps.push({});
        continue;
      }
      const entry = live.get(step.session);
      const {feeds, fetches, readers} =
        await page.runArguments(entry, sessionSpec, step.graph, step.variant);
      const key = `${step.session}/${step.graph}`;
      runsOf.set(key, (runsOf.get(key) || 0) + 1);
      if (session.capture && runsOf.get(key) <= 2) {
        page.faults?.beginRecording(sessionName(step.session), sessionSpec.faults, 1);
      }
      page.faults?.startRun();
      page.startRun();
      running = true;
      let results;
      try {
        results = await (session.graphs > 1
          ? entry.session.run(feeds, fetches, {extra: {gpu_graph_id: String(step.graph)}})
          : entry.session.run(feeds, fetches));
      } finally {
        page.faults?.endRun(sessionName(step.session)); // ends a recording
      }
      running = false;
      const counts = page.endRun();
      const outputs = {};
      for (const outputName of spec.outputNames) {
        const tensor = results[outputName];
        const onGpu = tensor.location === 'gpu-buffer'; // getData moves it to 'cpu'
        const data = await (readers ? readers[outputName]() : tensor.getData());
        outputs[outputName] = page.output(tensor, data);
        if (!readers && onGpu && !step.hold) {
          tensor.dispose(); // still holds its GPU buffer and OrtValue until then
        } else if (!readers && step.hold) {
          held.set(step.session, [...(held.get(step.session) || []), tensor]);
        }
      }
      steps.push({outputs, counts});
    } catch (error) {
      if (running) {
        page.endRun();
      }
      return {status: 'error', message: text(error), steps, failedStep: i};
    }
  }
  return {status: 'ok', message: '', steps};
};
