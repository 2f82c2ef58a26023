//! The Vulkan loader and instance, opened once per process.
//!
//! `libvulkan` is loaded at run time: without it (or without a driver behind it) the family
//! has 0 devices and one log line says why. `TESSERA_VULKAN_VALIDATION=1` turns on the Khronos
//! validation layer where it is installed; what it reports is logged and counted
//! ([`validation_messages`]), so tests can demand a clean run.

use std::ffi::{c_void, CStr};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::OnceLock;

use ash::{ext, vk, Entry, Instance};

/// The loader and the instance every device of the family belongs to.
pub(crate) struct Vk {
    /// The loaded library: kept open as long as the instance.
    pub entry: Entry,
    pub instance: Instance,
    /// The Vulkan version the instance was created for (1.2 or 1.3).
    pub api_version: u32,
}

static VALIDATION_ERRORS: AtomicUsize = AtomicUsize::new(0);

/// How many errors and warnings the validation layer reported so far (always 0 without
/// `TESSERA_VULKAN_VALIDATION=1`).
pub fn validation_messages() -> usize {
    VALIDATION_ERRORS.load(Ordering::Relaxed)
}

/// Whether the environment asks for the validation layer.
fn validation_requested() -> bool {
    std::env::var("TESSERA_VULKAN_VALIDATION")
        .is_ok_and(|v| !matches!(v.trim().to_ascii_lowercase().as_str(), "" | "0" | "false" | "no" | "off"))
}

/// The instance, or why there is none (no loader, no driver, an instance the loader refused).
pub(crate) fn get() -> Result<&'static Vk, String> {
    static VK: OnceLock<Result<Vk, String>> = OnceLock::new();
    VK.get_or_init(create).as_ref().map_err(Clone::clone)
}

const VALIDATION_LAYER: &CStr = c"VK_LAYER_KHRONOS_validation";

fn create() -> Result<Vk, String> {
    // SAFETY: loading the system's Vulkan loader runs its initialisers; it is the library the
    // platform provides for exactly this use.
    let entry = unsafe { Entry::load() }.map_err(|e| format!("no Vulkan loader ({e})"))?;
    // SAFETY: a global query of the loaded entry points.
    let version = unsafe { entry.try_enumerate_instance_version() }.ok().flatten().unwrap_or(vk::API_VERSION_1_0);
    if version < vk::API_VERSION_1_2 {
        return Err(format!(
            "the Vulkan loader offers version {}.{}, tessera needs 1.2",
            vk::api_version_major(version),
            vk::api_version_minor(version)
        ));
    }
    let app = vk::ApplicationInfo::default()
        .application_name(c"tessera")
        .engine_name(c"tessera")
        .api_version(vk::API_VERSION_1_3.min(version));
    let mut layers = Vec::new();
    let mut extensions = Vec::new();
    let validation = validation_requested() && has_layer(&entry, VALIDATION_LAYER);
    if validation {
        layers.push(VALIDATION_LAYER.as_ptr());
        extensions.push(ext::debug_utils::NAME.as_ptr());
    } else if validation_requested() {
        log::warn!("Vulkan: TESSERA_VULKAN_VALIDATION is set but the validation layer is not installed");
    }
    let info = vk::InstanceCreateInfo::default()
        .application_info(&app)
        .enabled_layer_names(&layers)
        .enabled_extension_names(&extensions);
    // SAFETY: the create info and everything it points to live through the call.
    let instance = unsafe { entry.create_instance(&info, None) }.map_err(|e| format!("no Vulkan instance ({e})"))?;
    if validation {
        install_messenger(&entry, &instance);
    }
    Ok(Vk { entry, instance, api_version: vk::API_VERSION_1_3.min(version) })
}

fn has_layer(entry: &Entry, name: &CStr) -> bool {
    // SAFETY: a global query of the loaded entry points.
    let layers = unsafe { entry.enumerate_instance_layer_properties() }.unwrap_or_default();
    layers.iter().any(|l| l.layer_name_as_c_str().is_ok_and(|n| n == name))
}

/// Routes the validation layer's warnings and errors to the log and the counter. The
/// messenger lives as long as the instance, that is, the process.
fn install_messenger(entry: &Entry, instance: &Instance) {
    let utils = ext::debug_utils::Instance::new(entry, instance);
    let info = vk::DebugUtilsMessengerCreateInfoEXT::default()
        .message_severity(vk::DebugUtilsMessageSeverityFlagsEXT::WARNING | vk::DebugUtilsMessageSeverityFlagsEXT::ERROR)
        .message_type(
            vk::DebugUtilsMessageTypeFlagsEXT::GENERAL
                | vk::DebugUtilsMessageTypeFlagsEXT::VALIDATION
                | vk::DebugUtilsMessageTypeFlagsEXT::PERFORMANCE,
        )
        .pfn_user_callback(Some(on_message));
    // SAFETY: the instance was created with the debug-utils extension enabled.
    if let Err(e) = unsafe { utils.create_debug_utils_messenger(&info, None) } {
        log::warn!("Vulkan: the validation messenger could not be installed ({e})");
    }
}

unsafe extern "system" fn on_message(
    severity: vk::DebugUtilsMessageSeverityFlagsEXT,
    _kind: vk::DebugUtilsMessageTypeFlagsEXT,
    data: *const vk::DebugUtilsMessengerCallbackDataEXT<'_>,
    _user: *mut c_void,
) -> vk::Bool32 {
    // SAFETY: the layer passes a valid callback structure (or null) for the call's duration.
    let message = unsafe { data.as_ref() }
        .and_then(|d| (!d.p_message.is_null()).then_some(d.p_message))
        // SAFETY: a non-null message is a NUL-terminated string owned by the layer.
        .map(|p| unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned())
        .unwrap_or_default();
    VALIDATION_ERRORS.fetch_add(1, Ordering::Relaxed);
    if severity.contains(vk::DebugUtilsMessageSeverityFlagsEXT::ERROR) {
        log::error!("Vulkan validation: {message}");
    } else {
        log::warn!("Vulkan validation: {message}");
    }
    vk::FALSE
}
