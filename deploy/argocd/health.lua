-- Argo CD health check for grpo.dev/GRPORun (key: resource.customizations.health.grpo.dev_GRPORun).
--
-- Argo CD runs this with only Lua's base and table libraries (no string library), so messages
-- are built with `..` and tostring. The operator's status is the source: phase, conditions,
-- observedGeneration, ledger, recovery and terminal (docs/api.md).
--
--   no status yet, or status.observedGeneration < metadata.generation -> Progressing
--   Pending, Accepted, Queued, Provisioning, Running, Recovering      -> Progressing
--   Suspended                                                         -> Suspended
--   Succeeded                                                         -> Healthy
--   Failed (including a run refused at acceptance), Cancelled         -> Degraded
local hs = {}

local function condition(status, type_)
  if status.conditions == nil then
    return nil
  end
  for _, c in ipairs(status.conditions) do
    if c.type == type_ then
      return c
    end
  end
  return nil
end

-- "reason: message", either part optional.
local function explain(reason, message)
  if reason ~= nil and reason ~= "" and message ~= nil and message ~= "" then
    return reason .. ": " .. message
  end
  if message ~= nil and message ~= "" then
    return message
  end
  if reason ~= nil then
    return reason
  end
  return ""
end

local function steps(status)
  local ledger = status.ledger or {}
  local done = ledger.completedSteps or 0
  if ledger.plannedSteps ~= nil then
    return "step " .. tostring(done) .. "/" .. tostring(ledger.plannedSteps)
  end
  return "step " .. tostring(done)
end

local status = obj.status
if status == nil or status.phase == nil then
  hs.status = "Progressing"
  hs.message = "Waiting for the operator to pick up the run"
  return hs
end

local generation = obj.metadata.generation
if generation ~= nil and (status.observedGeneration == nil or status.observedGeneration < generation) then
  hs.status = "Progressing"
  hs.message = "Waiting for the operator to observe generation " .. tostring(generation)
  return hs
end

local phase = status.phase
local terminal = status.terminal or {}
local recovery = status.recovery or {}

if phase == "Succeeded" then
  hs.status = "Healthy"
  hs.message = "Succeeded at " .. steps(status)
  if terminal.artifact ~= nil and terminal.artifact.path ~= nil then
    hs.message = hs.message .. "; artifact " .. terminal.artifact.path
  end
  return hs
end

if phase == "Failed" then
  hs.status = "Degraded"
  local accepted = condition(status, "Accepted")
  if accepted ~= nil and accepted.status == "False" then
    hs.message = "Not accepted: " .. explain(accepted.reason, accepted.message)
    return hs
  end
  local failed = condition(status, "Failed") or {}
  hs.message = "Failed: " .. explain(terminal.reason or failed.reason, terminal.message or failed.message)
  return hs
end

if phase == "Cancelled" then
  hs.status = "Degraded"
  hs.message = "Cancelled at " .. steps(status)
  if terminal.message ~= nil and terminal.message ~= "" then
    hs.message = hs.message .. ": " .. terminal.message
  end
  return hs
end

if phase == "Suspended" then
  hs.status = "Suspended"
  hs.message = "Suspended at " .. steps(status) .. "; resumes from its checkpoint when runPolicy.suspend is false"
  return hs
end

if phase == "Queued" then
  hs.status = "Progressing"
  local queue = nil
  if obj.spec ~= nil and obj.spec.runPolicy ~= nil then
    queue = obj.spec.runPolicy.queueName
  end
  if queue ~= nil then
    hs.message = "Queued in Kueue LocalQueue " .. queue .. ", waiting for admission"
  else
    hs.message = "Queued, waiting for admission"
  end
  return hs
end

if phase == "Recovering" then
  hs.status = "Progressing"
  hs.message = "Recovering at " .. steps(status) .. ": attempt " .. tostring(recovery.attempt or 1)
  if recovery.maxRestarts ~= nil then
    hs.message = hs.message .. ", restart " .. tostring(recovery.restarts or 0) .. " of " .. tostring(recovery.maxRestarts)
  end
  local recovering = condition(status, "Recovering")
  if recovering ~= nil and recovering.reason ~= nil then
    hs.message = hs.message .. " (" .. explain(recovering.reason, recovering.message) .. ")"
  end
  return hs
end

if phase == "Running" then
  hs.status = "Progressing"
  hs.message = "Running: " .. steps(status) .. ", attempt " .. tostring(recovery.attempt or 1)
  local progress = status.progress or {}
  if progress.activity ~= nil and progress.activity ~= "Training" then
    hs.message = hs.message .. ", " .. progress.activity
  end
  if progress.eta ~= nil and progress.eta ~= "" then
    hs.message = hs.message .. ", ETA " .. progress.eta
  end
  return hs
end

if phase == "Provisioning" then
  hs.status = "Progressing"
  hs.message = "Provisioning the RayCluster"
  local ready = condition(status, "ClusterReady")
  if ready ~= nil and ready.reason ~= nil then
    hs.message = hs.message .. " (ClusterReady: " .. explain(ready.reason, ready.message) .. ")"
  end
  return hs
end

if phase == "Pending" or phase == "Accepted" then
  hs.status = "Progressing"
  hs.message = phase
  return hs
end

hs.status = "Unknown"
hs.message = "Unknown phase " .. tostring(phase)
return hs
