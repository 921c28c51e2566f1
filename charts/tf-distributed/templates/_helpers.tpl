{{/*
The chart's named templates ("tf-distributed.*"), one file per concern:
  _names.tpl       name, fullname (name budget), componentName, namespace, serviceAccountName
  _labels.tpl      selectorLabels, releaseLabels, labels, podLabels, metadata, podMetadata, tfPodSelector
  _images.tpl      image, imagePullPolicy, projectImage (the supervisor's and the helm test pod's),
                   tensorboardImage, tensorboardImageWarning
  _podspec.tpl     podCommon, affinity, volumes, volumeMounts, resources, tfProbes, tfContainer
  _tfcluster.tpl   psEnabled/workerEnabled/chiefEnabled, workersAsJob, jobsetEnabled, runRole, runJobName,
                   tfRoles, taskHost, taskAddress, clusterSpec and its size (taskHostShape, clusterMapBytes,
                   tfConfigBytes, ...), prelude, trainerArgs, trainerRoles, tfArgv
  _storage.tpl     claimName, colocate, claimPods, storageNeed
  _run.tpl         supervisorEnabled, progressEnabled, supervisorScales, supervisorEvaluator, runSpec,
                   liveRun, liveRunSpec, runFinished, runSuspended, finishedReplicas, cleanupTargets,
                   supervisorEnv
  _scheduling.tpl  isTfComponent, tfPodCount, gangName, tfSchedulerName, gangPodMetadata, kueueJobSetLabels,
                   topology, topologyPodAnnotations, volcanoTopology, volcanoNetworkTopology
  _quantities.tpl  quantityText, quantityKey
  _tf_workloads.tpl  tfHeadlessService, tfStatefulSet, tfJob, tfJobSpec (also the JobSet's Jobs);
                   _ingress.tpl  ingress
  _metrics.tpl     serviceMonitorScrapesTf, servingMetricsEnabled, monitoredComponents, monitor, scraperRule
  _validate.tpl    validateValues;  _validate_scheduling.tpl  schedulingProblems (its gang, queue, topology
                   and workload.kind rules)
Calling convention: a helper that needs only the root context takes it as is
  include "tf-distributed.fullname" .
and one that needs more takes a dict with the root context under "context", as Bitnami's common
library does:
  include "tf-distributed.volumes" (dict "context" $ "component" .Values.worker "readOnly" true)
The keys mean the same everywhere: "role" is a component's name (app.kubernetes.io/component, the
<fullname>-<role> suffix), "component" its values block (.Values.worker). Never a positional list
(tests/chart/test_helpers_split.py holds every template to this).
*/}}
